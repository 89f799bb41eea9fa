// Writes snapshots after changes. A snapshot covers a whole tenant (its services, nodes, targets)
// or the whole fleet, so building one costs in proportion to its size, not to the change: writing
// one per finished order would make a rollout over n nodes cost n². So each scope (the system,
// each tenant) is written at most once per interval, and one trailing write covers every change
// that arrived in between. The interval is at least SYSTEM_EVERY_MS for the system snapshot, and
// for every scope at least COST_FACTOR times as long as its last build took. The tenants'
// snapshots also share one budget: they are written one at a time, and after each the next waits
// FLEET_FACTOR - 1 times as long as it took, so a thousand tenants changing at once cost the
// controller about 1/FLEET_FACTOR of its time, not a thousand small budgets (a small tenant's
// snapshot is written within milliseconds of a change on a quiet controller; under load the
// owed ones queue, oldest first, and each is written once however often it changed meanwhile).
// Nobody waits for a write: the change is already recorded (events, records) and a snapshot is a
// view of it. Reading the latest snapshot first writes one still owed to that scope, so what the
// API shows covers every change it acknowledged; on shutdown every owed write is made, and after
// a crash start-up writes, in the background, the tenants' snapshots older than their records
// (catchUp; snapshot reads and shutdown wait for it).
// A snapshot is built a slice of resources at a time, letting other calls run in between.
import { v4 as uuidv4 } from "uuid";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Store } from "../store/store.js";
import { eachScannedResource, scannedResources } from "../store/each-page.js";
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
// A scope waits at least this many times as long as its last snapshot took to write.
const COST_FACTOR = 50;
// All tenants' snapshots together take at most about 1/FLEET_FACTOR of the controller's time.
const FLEET_FACTOR = 20;

// One scope's writes: when the last began and how long it took, the one running, the one owed.
interface Scope {
  tenantId: string | undefined;
  lastAt: number;
  lastMs: number;
  running: Promise<void> | undefined;
  timer: NodeJS.Timeout | undefined;
  /** The latest change not yet covered by a write that began after it. */
  owed: SnapshotTrace | undefined;
}

export class SnapshotWriter {
  private readonly scopes = new Map<string, Scope>();
  // The start-up pass over the tenants (catchUp), while it runs.
  private catchingUp: Promise<void> | undefined;
  // Tenant scopes due and owed a write, oldest first, waiting for the fleet's budget (see pump).
  private readonly queued = new Set<Scope>();
  // The tenant write running under the fleet's budget, and when the next one may start.
  private fleetRunning: Scope | undefined;
  private fleetFreeAt = 0;
  // Readers settling a scope (see settle): the queue waits for them.
  private readers = 0;
  private fleetTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    /** The system snapshot covers the whole fleet: written at most this often. */
    private readonly systemEveryMs = 5000,
  ) {}

  /**
   * Notes a change of the tenant (when tenantId is set; its snapshot and the system's are owed)
   * and schedules the writes: at once for a scope not written within its interval, else at the
   * interval's end, one write for every change owed by then. Returns without waiting for them.
   */
  afterChange(tenantId: string, trace: SnapshotTrace): Promise<void> {
    this.owe(this.scope(undefined), trace);
    if (tenantId !== "") this.owe(this.scope(tenantId), trace);
    return Promise.resolve();
  }

  /** Makes the write still owed to a scope (and waits for one running): before its latest is read. */
  async settle(tenantId?: string): Promise<void> {
    await this.catchingUp;
    const s = this.scopes.get(tenantId ?? "");
    if (!s) return;
    // A reader does not wait for the budget, only for the tenant write under way (one at a
    // time still holds); meanwhile the queue starts no other.
    this.readers++;
    try {
      for (;;) {
        // The write that ended may have started the next one owed; else start it now.
        await s.running?.catch(() => undefined);
        if (!s.owed) return;
        clearTimeout(s.timer);
        s.timer = undefined;
        this.queued.delete(s);
        const other = s.tenantId === undefined ? undefined : this.fleetRunning;
        if (other) {
          await other.running?.catch(() => undefined);
          continue;
        }
        if (s.tenantId !== undefined) this.fleetRunning = s;
        this.start(s);
      }
    } finally {
      this.readers--;
      this.pump();
    }
  }

  /** Makes every write still owed (on shutdown). */
  async flush(): Promise<void> {
    await this.catchingUp;
    for (const s of [...this.scopes.values()]) await this.settle(s.tenantId);
  }

  /**
   * After a crash, writes owed snapshots may be lost: writes one for each tenant whose record
   * changed after its latest snapshot was taken (or that has none yet but has had an order finish).
   */
  catchUp(trace: SnapshotTrace): Promise<number> {
    const done = this.owedAfterStop(trace);
    // Reads and shutdown wait for it (settle, flush); start-up does not.
    this.catchingUp = done.then(
      () => undefined,
      () => undefined,
    );
    return done;
  }

  private async owedAfterStop(trace: SnapshotTrace): Promise<number> {
    let owed = 0;
    for await (const t of eachScannedResource(this.store, { resourceType: "tenant", pageSize: 250 })) {
      const latest = await this.store.getLatestSnapshot("tenant", t.id);
      const changedAt = t.updatedAt ? timestampMs(t.updatedAt) : 0;
      const finished = t.currentState?.kind.case === "tenant" && t.currentState.kind.value.targets.some((x) => x.finishedAt);
      const stale = latest ? (latest.createdAt ? timestampMs(latest.createdAt) : 0) < changedAt : finished;
      if (!stale) continue;
      owed++;
      await this.afterChange(t.id, trace);
    }
    return owed;
  }

  private scope(tenantId: string | undefined): Scope {
    const key = tenantId ?? "";
    let s = this.scopes.get(key);
    if (!s) this.scopes.set(key, (s = { tenantId, lastAt: 0, lastMs: 0, running: undefined, timer: undefined, owed: undefined }));
    return s;
  }

  private owe(s: Scope, trace: SnapshotTrace): void {
    s.owed = trace;
    this.schedule(s);
  }

  // Starts the owed write when the scope is due, else sets a timer for when it is (a running
  // write schedules again when it ends).
  private schedule(s: Scope): void {
    if (!s.owed || s.running || s.timer) return;
    const every = Math.max(s.tenantId === undefined ? this.systemEveryMs : 0, COST_FACTOR * s.lastMs);
    const wait = s.lastAt + every - Date.now();
    if (wait <= 0) {
      if (s.tenantId === undefined) this.start(s);
      else {
        this.queued.add(s);
        this.pump();
      }
      return;
    }
    s.timer = setTimeout(() => {
      s.timer = undefined;
      this.schedule(s);
    }, wait);
    s.timer.unref();
  }

  // Starts the oldest queued tenant write when none runs under the budget and the budget allows;
  // else sets the one timer for when it does.
  private pump(): void {
    if (this.fleetRunning || this.fleetTimer || this.readers > 0) return;
    const wait = this.fleetFreeAt - Date.now();
    for (const s of this.queued) {
      if (!s.owed || s.running) {
        this.queued.delete(s); // settled by a reader meanwhile
        continue;
      }
      if (wait > 0) {
        this.fleetTimer = setTimeout(() => {
          this.fleetTimer = undefined;
          this.pump();
        }, wait);
        this.fleetTimer.unref();
        return;
      }
      this.queued.delete(s);
      this.fleetRunning = s;
      this.start(s);
      return;
    }
  }

  private start(s: Scope): void {
    const trace = s.owed!;
    s.owed = undefined;
    s.lastAt = Date.now();
    const started = performance.now();
    s.running = (async () => {
      const resources = await this.resources(s.tenantId);
      await this.write(s.tenantId === undefined ? "system" : "tenant", resources, trace, s.tenantId);
    })()
      .catch((e: unknown) =>
        this.log.error({ action: "snapshot_created", result: "error", tenant_id: s.tenantId, err: e }, "snapshot failed"),
      )
      .finally(() => {
        // Wall time: includes slices of other work run in between, which errs on the side of
        // writing snapshots less often under load.
        s.lastMs = performance.now() - started;
        s.running = undefined;
        if (this.fleetRunning === s) {
          this.fleetRunning = undefined;
          this.fleetFreeAt = Date.now() + (FLEET_FACTOR - 1) * s.lastMs;
        }
        this.schedule(s);
        this.pump();
      });
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
      out.push(...(await scannedResources(this.store, { resourceType, tenantId, pageSize: 250 })));
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
