// The registry watch loop: the leader's alone. It lists the artifacts every few seconds and looks
// at each one with a watch when it is due: at once when first seen (a new artifact, a new leader,
// or its spec changed), then every interval of its watch (default 60 s). A look that failed is
// tried again after its interval plus a backoff that grows with each failure in a row
// (common/backoff.ts, full jitter), unless it failed for a reason that passes by itself (the
// registry unreachable or timed out, the repository not pushed yet): then at its interval. At most 4 looks run at once. A look that recorded a version
// wakes the promotion loop. The schedule is in memory: an artifact changed through the API (or the
// registry secret it names) is looked at again at once; a change made through another controller
// is seen by the next listing (the spec is compared).
//
//   timer -> list artifacts -> the due ones, 4 at a time: look (registry-watch-look.ts)
//                                   -> versions recorded? wake the promotion loop
//                                   -> ok: again after the interval; failed: interval + backoff
import { toBinary } from "@bufbuild/protobuf";
import { ArtifactSpecSchema } from "../../gen/skipper/v1/delivery_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import { fullJitterDelay } from "../../common/backoff.js";
import { mapLimit } from "../../common/map-limit.js";
import type { ReconcileTriggers } from "../reconcile/triggers.js";
import type { PromotionTriggers } from "./promotion-triggers.js";
import { artifactOf } from "../delivery/artifact-versions.js";
import { scannedResources } from "../store/each-page.js";
import { RegistryClient } from "./registry-client.js";
import { type WatchLookDeps, lookOnce } from "./registry-watch-look.js";
import { watchIntervalMs } from "./registry-watch.js";

export interface RegistryWatchLoopDeps extends WatchLookDeps {
  /** A version was recorded: the promotion loop plans again. */
  versionChanged: () => void;
  /** How often the artifacts are listed (default 5 s): a new artifact is looked at within this. */
  listEveryMs?: number;
  /** The backoff's jitter, in [0, 1) (default Math.random; tests fix it). */
  random?: () => number;
}

const MAX_AT_ONCE = 4;
const BACKOFF_BASE_MS = 5_000;
const BACKOFF_CAP_MS = 15 * 60_000;

interface Schedule {
  /** When the next look is due (ms since the epoch). */
  at: number;
  /** Failed looks in a row. */
  failures: number;
  /** The spec the schedule was made for: another one is looked at at once. */
  spec: string;
  /** The registry secret the artifact names (its change reschedules the artifact). */
  secretId: string;
}

/** Watches every artifact with a watch on its interval; holds only its schedule. */
export class RegistryWatchLoop {
  private readonly due = new Map<string, Schedule>();
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private again = false;
  private stopped = true;

  constructor(private readonly deps: RegistryWatchLoopDeps) {}

  /** Starts listing and looking (the first round now). */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.due.clear();
    this.run();
  }

  /** Stops the timer and waits for the looks under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.round;
  }

  /** A resource written through the API: an artifact, or a secret an artifact names, is looked at now. */
  resourceChanged(r: Resource): void {
    let hit = false;
    for (const [id, s] of this.due) {
      if ((r.resourceType === "artifact" && id === r.id) || (r.resourceType === "secret" && s.secretId === r.id)) {
        this.due.delete(id);
        hit = true;
      }
    }
    if (hit || (r.resourceType === "artifact" && artifactOf(r)?.watch)) this.wake();
  }

  // A round now, or right after the one under way.
  private wake(): void {
    if (this.stopped) return;
    if (this.round) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.run();
  }

  private run(): void {
    this.again = false;
    this.round = this.lookDue()
      .catch((e) => this.deps.logger.error({ action: "registry_watch", result: "error", err: e }, "could not list the artifacts"))
      .finally(() => {
        this.round = undefined;
        if (this.stopped) return;
        this.timer = setTimeout(() => this.run(), this.again ? 0 : this.wakeInMs());
        this.timer.unref();
      });
  }

  // One round: forget artifacts gone (or no longer watched), look at those due.
  private async lookDue(): Promise<void> {
    const artifacts = (await scannedResources(this.deps.store, { resourceType: "artifact" })).filter((r) => {
      const a = artifactOf(r);
      return a?.watch !== undefined && a.source.case === "image";
    });
    const listed = new Set(artifacts.map((r) => r.id));
    for (const id of this.due.keys()) if (!listed.has(id)) this.due.delete(id);
    const now = this.deps.now().getTime();
    const due = artifacts.filter((r) => {
      const s = this.due.get(r.id);
      return !s || s.at <= now || s.spec !== specKey(r);
    });
    let created = 0;
    await mapLimit(due, MAX_AT_ONCE, async (r) => {
      if (!this.stopped) created += await this.lookAt(r);
    });
    if (created > 0) this.deps.versionChanged();
  }

  private async lookAt(r: Resource): Promise<number> {
    const spec = artifactOf(r)!;
    const intervalMs = watchIntervalMs(spec);
    const failures = this.due.get(r.id)?.failures ?? 0;
    const backoff = fullJitterDelay(failures, BACKOFF_BASE_MS, BACKOFF_CAP_MS, this.deps.random);
    const wait = (ok: boolean, transient: boolean) => intervalMs + (ok || transient ? 0 : backoff);
    const result = await lookOnce(this.deps, r, wait);
    const now = this.deps.now().getTime();
    this.due.set(r.id, {
      at: now + wait(result.ok, result.transient ?? false),
      failures: result.ok || result.transient ? 0 : failures + 1,
      spec: specKey(r),
      secretId: spec.source.case === "image" ? spec.source.value.registrySecretId : "",
    });
    return result.created;
  }

  // Until the next listing, or the next look due before it.
  private wakeInMs(): number {
    const now = this.deps.now().getTime();
    let wake = this.deps.listEveryMs ?? 5000;
    for (const s of this.due.values()) wake = Math.min(wake, s.at - now);
    return Math.max(50, wake);
  }
}

function specKey(r: Resource): string {
  const a = artifactOf(r);
  return a ? Buffer.from(toBinary(ArtifactSpecSchema, a)).toString("base64") : "";
}

/** What the loop is built from: the controller's service deps (ServiceDeps fits). */
export interface RegistryWatchParts extends Omit<WatchLookDeps, "client"> {
  triggers: Pick<ReconcileTriggers, "watch">;
  promotion: Pick<PromotionTriggers, "versionChanged">;
}

/** The leader's registry watch (told of API changes through the triggers); `registryCaPem`: --registry-ca-file's text. */
export function registryWatchLoop(parts: RegistryWatchParts, opts: { registryCaPem?: string }): RegistryWatchLoop {
  const { store, logger, now, keyRing, triggers, promotion } = parts;
  const client = new RegistryClient({ caPem: opts.registryCaPem });
  const loop = new RegistryWatchLoop({ store, logger, now, keyRing, client, versionChanged: () => promotion.versionChanged() });
  triggers.watch(loop);
  return loop;
}
