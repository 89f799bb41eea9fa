// The Git sync loop's schedule, with a clock the test moves and a sync it answers: a new source
// is synced at once, then after its interval; a failing one waits its interval plus a backoff
// that grows with each failure in a row, and a success resets it. Rounds are observed (the loop
// lists the sources once a round), never waited for by a fixed delay.
import { create } from "@bufbuild/protobuf";
import { afterEach, describe, expect, it } from "vitest";
import { GitSourceSpecSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { type Resource, ResourceSchema, ResourceSpecSchema } from "../../gen/skipper/v1/resource_pb.js";
import { createLogger } from "../../common/logging/logger.js";
import type { Store } from "../store/store.js";
import { GitSyncLoop } from "./git-sync-loop.js";

const source = (id: string, seconds: number): Resource =>
  create(ResourceSchema, {
    id,
    resourceType: "git_source",
    desiredState: create(ResourceSpecSchema, {
      kind: {
        case: "gitSource",
        value: create(GitSourceSpecSchema, { url: "https://git.example/r.git", interval: { seconds: BigInt(seconds) } }),
      },
    }),
  });

let loop: GitSyncLoop | undefined;
afterEach(async () => {
  await loop?.stop();
  loop = undefined;
});

// A loop over `sources` whose syncs answer `outcomes` in turn; `rounds()` resolves after n more listings.
function harness(sources: Resource[], outcomes: boolean[]) {
  let now = 0;
  let listings = 0;
  const waiters: Array<{ at: number; resolve: () => void }> = [];
  const synced: Array<{ id: string; at: number }> = [];
  const store = {
    scanResources: async () => {
      listings++;
      for (const w of waiters.filter((w) => w.at <= listings)) w.resolve();
      return { items: sources, nextPageToken: "" };
    },
  } as unknown as Store;
  loop = new GitSyncLoop({
    store,
    logger: createLogger({ service: "test", stdout: false, level: "silent" }).logger,
    now: () => new Date(now),
    listEveryMs: 100,
    // The most jitter: each backoff is its whole ceiling (10 s, then 20 s, ...).
    random: () => 1,
    sync: {
      sync: async (id: string) => {
        synced.push({ id, at: now });
        return { source: sources.find((s) => s.id === id)!, ok: outcomes.shift() ?? true };
      },
      mirrors: async () => [],
      removeMirrorIfGone: async () => false,
    },
  });
  return {
    synced,
    setNow: (ms: number) => {
      now = ms;
    },
    // Resolves once the loop has listed `n` more times (each round lists once, after the last round's syncs).
    rounds: (n: number) => new Promise<void>((resolve) => waiters.push({ at: listings + n, resolve })),
  };
}

describe("git sync loop", () => {
  it("a new source is synced at once, then not before its interval, then at it", async () => {
    const h = harness([source("a", 10)], [true, true]);
    const first = h.rounds(2);
    loop!.start();
    await first;
    expect(h.synced).toEqual([{ id: "a", at: 0 }]);
    h.setNow(9_999);
    await h.rounds(2);
    expect(h.synced).toHaveLength(1);
    h.setNow(10_000);
    await h.rounds(2);
    expect(h.synced).toEqual([
      { id: "a", at: 0 },
      { id: "a", at: 10_000 },
    ]);
  });

  it("failures wait the interval plus a growing backoff; a success resets it", async () => {
    const h = harness([source("a", 10)], [false, false, true, true]);
    loop!.start();
    await h.rounds(2);
    expect(h.synced).toHaveLength(1);
    // After one failure: the interval plus 10 s (the backoff's base).
    h.setNow(19_999);
    await h.rounds(2);
    expect(h.synced).toHaveLength(1);
    h.setNow(20_000);
    await h.rounds(2);
    expect(h.synced.map((s) => s.at)).toEqual([0, 20_000]);
    // After two: the interval plus 20 s.
    h.setNow(49_999);
    await h.rounds(2);
    expect(h.synced).toHaveLength(2);
    h.setNow(50_000);
    await h.rounds(2);
    expect(h.synced.map((s) => s.at)).toEqual([0, 20_000, 50_000]);
    // That one succeeded: the next is due at exactly the interval.
    h.setNow(59_999);
    await h.rounds(2);
    expect(h.synced).toHaveLength(3);
    h.setNow(60_000);
    await h.rounds(2);
    expect(h.synced.map((s) => s.at)).toEqual([0, 20_000, 50_000, 60_000]);
  });

  it("a source no longer listed is forgotten: listed again, it is synced at once", async () => {
    const sources = [source("a", 60), source("b", 60)];
    const h = harness(sources, []);
    loop!.start();
    await h.rounds(2);
    expect(h.synced.map((s) => s.id).sort()).toEqual(["a", "b"]);
    const b = sources.pop()!;
    h.setNow(1_000);
    await h.rounds(2);
    sources.push(b);
    await h.rounds(2);
    expect(h.synced.map((s) => `${s.id}@${s.at}`).sort()).toEqual(["a@0", "b@0", "b@1000"]);
  });
});
