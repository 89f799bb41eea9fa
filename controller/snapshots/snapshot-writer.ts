// Writes snapshots when deployments finish. A tenant's snapshot is written for each finished
// order of that tenant. The system snapshot covers the whole fleet, so its cost grows with the
// fleet: it is written at most every few seconds (longer when building one takes long, so that
// snapshots never cost more than about 2% of the controller's time), and one trailing write covers
// every change that arrived in between (a busy fleet gets a fresh system snapshot every interval,
// not per order). A snapshot is built a slice of resources at a time, letting other calls run in
// between: with thousands of resources one build would otherwise hold up every request for a
// noticeable fraction of a second.
import { v4 as uuidv4 } from "uuid";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Store } from "../store/store.js";
import { allResources } from "../store/each-page.js";
import type { Logger } from "../../common/logging/logger.js";
import { recordEvents } from "../events/event-recorder.js";
import { assembleSnapshot, snapshotEntry, type SnapshotEntry } from "./build-snapshot.js";
import { RESOURCE_TYPES } from "../../common/ids.js";

/** Ids recorded with a snapshot: the call that caused it. */
export interface SnapshotTrace {
  requestId: string;
  correlationId: string;
}

// Resources turned into snapshot entries between two yields to the event loop.
const SLICE = 100;
// The system snapshot waits at least this many times as long as the last one took to write.
const SYSTEM_COST_FACTOR = 50;

export class SnapshotWriter {
  private running: Promise<void> | undefined;
  private lastSystemAt = 0;
  private lastSystemMs = 0;
  private trailing: NodeJS.Timeout | undefined;
  private trailingTrace: SnapshotTrace | undefined;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    /** The system snapshot covers the whole fleet: written at most this often. */
    private readonly systemEveryMs = 5000,
  ) {}

  /**
   * Writes the tenant's snapshot (when tenantId is set), and the system snapshot: at once when
   * none was written within systemEveryMs (the caller waits for it), else once at the end of the
   * interval for every change that arrived meanwhile.
   */
  async afterChange(tenantId: string, trace: SnapshotTrace): Promise<void> {
    const system = this.system(trace);
    if (tenantId !== "") {
      await this.write("tenant", await this.resources(tenantId), trace, tenantId);
    }
    await system;
  }

  /** Writes a system snapshot still owed to changes (on shutdown). */
  async flush(): Promise<void> {
    if (this.trailing) {
      clearTimeout(this.trailing);
      this.trailing = undefined;
      const trace = this.trailingTrace!;
      this.trailingTrace = undefined;
      await this.running;
      await this.writeSystem(trace);
    }
    await this.running;
  }

  private system(trace: SnapshotTrace): Promise<void> {
    const wait = this.lastSystemAt + Math.max(this.systemEveryMs, SYSTEM_COST_FACTOR * this.lastSystemMs) - Date.now();
    if (!this.running && wait <= 0) {
      this.lastSystemAt = Date.now();
      this.running = this.writeSystem(trace).finally(() => (this.running = undefined));
      return this.running;
    }
    this.trailingTrace = trace;
    if (!this.trailing) {
      this.trailing = setTimeout(
        () => {
          this.trailing = undefined;
          const next = this.trailingTrace!;
          this.trailingTrace = undefined;
          void (this.running ?? Promise.resolve())
            .then(() => this.system(next))
            .catch((e: unknown) => this.log.error({ action: "snapshot_created", result: "error", err: e }, "system snapshot failed"));
        },
        Math.max(wait, 50),
      );
      this.trailing.unref();
    }
    return Promise.resolve();
  }

  private async writeSystem(trace: SnapshotTrace): Promise<void> {
    const started = performance.now();
    try {
      await this.write("system", await this.resources(), trace);
    } finally {
      // Wall time: includes slices of other work run in between, which errs on the side of
      // writing system snapshots less often under load.
      this.lastSystemMs = performance.now() - started;
    }
  }

  /**
   * What a snapshot shows: every resource (of the tenant, when given) except deployments and
   * rollouts, which are one record per change and would grow a snapshot without bound, plus each
   * tenant's current deployment and latest rollout (the ones its observed state names).
   */
  private async resources(tenantId?: string): Promise<Resource[]> {
    const out: Resource[] = [];
    for (const resourceType of RESOURCE_TYPES) {
      if (resourceType === "deployment" || resourceType === "rollout") continue;
      out.push(...(await allResources(this.store, { resourceType, tenantId, pageSize: 250 })));
    }
    if (tenantId !== undefined) out.push(...(await this.tenantContext(out)));
    const current = await Promise.all(
      out.flatMap((r) => {
        if (r.currentState?.kind.case !== "tenant") return [];
        const { deploymentId, rolloutId } = r.currentState.kind.value;
        return [
          deploymentId !== "" ? this.store.getResource("deployment", deploymentId) : undefined,
          rolloutId !== "" ? this.store.getResource("rollout", rolloutId) : undefined,
        ];
      }),
    );
    for (const d of current) if (d) out.push(d);
    return out;
  }

  // A tenant's snapshot also shows the limits its services use and the nodes it runs on.
  private async tenantContext(own: Resource[]): Promise<Resource[]> {
    const limits = new Set<string>();
    const nodes = new Set<string>();
    for (const r of own) {
      const k = r.desiredState?.kind;
      if (k?.case === "service" && k.value.resourceLimitsId !== "") limits.add(k.value.resourceLimitsId);
      if (r.currentState?.kind.case === "tenant") r.currentState.kind.value.targets.forEach((t) => nodes.add(t.nodeId));
    }
    const found = await Promise.all([
      ...[...limits].sort().map((id) => this.store.getResource("resource_limits", id)),
      ...[...nodes].sort().map((id) => this.store.getResource("node", id)),
    ]);
    return found.filter((r): r is Resource => r !== undefined);
  }

  private async write(scope: "system" | "tenant", resources: Resource[], trace: SnapshotTrace, tenantId?: string): Promise<void> {
    const entries: SnapshotEntry[] = [];
    for (let i = 0; i < resources.length; i += SLICE) {
      if (i > 0) await new Promise((r) => setImmediate(r));
      for (const r of resources.slice(i, i + SLICE)) entries.push(snapshotEntry(r));
    }
    const snapshot = assembleSnapshot({ snapshotId: uuidv4(), scope, tenantId, ...trace, now: new Date() }, entries);
    await this.store.putSnapshot(snapshot);
    await recordEvents(this.store, [
      {
        type: "snapshot_created",
        ...trace,
        tenantId,
        data: { snapshot_id: snapshot.snapshotId, scope, resources: snapshot.resources.length },
      },
    ]);
    this.log.debug(
      { action: "snapshot_created", result: "ok", tenant_id: tenantId, metadata: { scope, snapshot_id: snapshot.snapshotId } },
      "snapshot written",
    );
  }
}
