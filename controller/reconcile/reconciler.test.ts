// The reconcile loop (reconcile/reconciler.ts) over a real file store: a pass that throws is
// queued again after its backoff and succeeds by itself, with no sweep to rescue it.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { ConvergenceStatus, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { ResourceType } from "../../common/ids.js";
import { createLogger } from "../../common/logging/logger.js";
import { FileStore } from "../store/file/file-store.js";
import type { GetOptions } from "../store/store.js";
import { Reconciler } from "./reconciler.js";
import { RolloutRecords } from "../rollouts/rollout-records.js";
import { TargetRecords } from "./target-records.js";
import { waitFor } from "../../test/helpers/processes.js";

/** A file store whose next reads of a chosen tenant fail (as many as asked). */
class FlakyStore extends FileStore {
  /** tenant id -> how many of its next reads fail. */
  readonly failReads = new Map<string, number>();
  injected = 0;

  override async getResource(type: ResourceType, id: string, options?: GetOptions): Promise<Resource | undefined> {
    const left = type === "tenant" ? (this.failReads.get(id) ?? 0) : 0;
    if (left > 0) {
      this.failReads.set(id, left - 1);
      this.injected++;
      throw new Error(`injected: reading tenant ${id} failed`);
    }
    return super.getResource(type, id, options);
  }

  /** Reads a resource without failing: the test's own reads must not use up an injected failure. */
  peek(type: ResourceType, id: string): Promise<Resource | undefined> {
    return super.getResource(type, id);
  }
}

let dir: string;
let store: FlakyStore;
let reconciler: Reconciler;
const closeLog: (() => void)[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "skipper-reconciler-"));
  store = new FlakyStore(dir);
  await store.open();
  const { logger, close } = createLogger({ service: "t", stdout: false, level: "silent" });
  closeLog.push(close);
  // No sweep timer, and start() (which sweeps once) is never called: only what the test queues runs.
  reconciler = new Reconciler({
    store,
    logger,
    now: () => new Date(),
    records: new TargetRecords(store),
    rollouts: new RolloutRecords(store),
    sweepIntervalMs: 0,
  });
});
afterEach(async () => {
  await reconciler.stop();
  await store.close();
  for (const close of closeLog.splice(0)) close();
  await rm(dir, { recursive: true, force: true });
});

describe("a pass that throws", () => {
  it("is queued again after a backoff and succeeds later without any sweep", async () => {
    await store.createResource(
      create(ResourceSchema, {
        id: "shop",
        resourceType: "tenant",
        desiredState: { kind: { case: "tenant", value: { displayName: "shop" } } },
      }),
    );
    const sweeps = vi.spyOn(reconciler.queue, "addAll");
    const backoffs = vi.spyOn(reconciler.queue, "addRateLimited");
    const passes = vi.spyOn(reconciler, "reconcileTenant");
    store.failReads.set("shop", 1);

    reconciler.queue.add("shop");

    const converged = await waitFor(
      "the retried pass to write the tenant's convergence",
      async () => {
        const t = await store.peek("tenant", "shop");
        return t?.convergence && reconciler.queue.failuresOf("shop") === 0 ? t.convergence : undefined;
      },
      10_000,
      20,
    );
    // What a successful pass of a tenant with nothing to run writes.
    expect(converged.status).toBe(ConvergenceStatus.NOTHING_TO_DEPLOY);
    expect(store.injected).toBe(1);
    expect(backoffs.mock.calls.map(([id]) => id)).toEqual(["shop"]);
    expect(passes.mock.calls.map(([id]) => id)).toEqual(["shop", "shop"]);
    expect(sweeps).not.toHaveBeenCalled();
  });

  it("backs off twice as long after each failure in a row, and a success resets the count", async () => {
    await store.createResource(
      create(ResourceSchema, { id: "shop", resourceType: "tenant", desiredState: { kind: { case: "tenant", value: {} } } }),
    );
    const backoffs = vi.spyOn(reconciler.queue, "addRateLimited");
    store.failReads.set("shop", 2);

    reconciler.queue.add("shop");

    await waitFor(
      "the third pass to succeed",
      async () => ((await store.peek("tenant", "shop"))?.convergence && reconciler.queue.failuresOf("shop") === 0 ? true : undefined),
      10_000,
      20,
    );
    expect(store.injected).toBe(2);
    expect(backoffs.mock.results.map((r) => r.value)).toEqual([200, 400]);
  });
});
