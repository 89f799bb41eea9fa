// The one owner of stored rollouts: resources of type rollout whose desired_state is what the
// rollout set out to do (RolloutSpec) and whose current_state is its record (Rollout). Every
// write goes through here with its events; callers hold the tenant's reconcile lock
// (TargetRecords.exclusive), so one tenant's rollouts have one writer at a time.
import { writeStatus } from "../resources/status-write.js";
import { clone, create, equals } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { type Rollout, RolloutSchema, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";
import type { Trace } from "../base/context.js";
import { isSkipperError } from "../base/errors.js";
import { buildEvent, recordEvents, type EventInput } from "../events/event-recorder.js";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import { scannedResources } from "../store/each-page.js";
import type { Store } from "../store/store.js";
import type { RolloutEventDraft } from "./rollout-actions.js";

/** The Rollout record a stored rollout resource holds. */
export function rolloutOf(r: Resource | undefined): Rollout | undefined {
  return r?.currentState?.kind.case === "rollout" ? r.currentState.kind.value : undefined;
}

/** Reads and writes rollouts; holds no state. */
export class RolloutRecords {
  constructor(private readonly store: Store) {}

  /** One rollout by id. */
  async get(id: string): Promise<Rollout | undefined> {
    return rolloutOf(await this.store.getResource("rollout", id));
  }

  /** Every freeze (resource type freeze) stored, expired ones too: they are few. */
  async freezes(): Promise<Resource[]> {
    return scannedResources(this.store, { resourceType: "freeze" });
  }

  /** Stores a new rollout (a retry of the same start finds the one stored) with rollout_started. */
  async create(rollout: Rollout, trace: Trace): Promise<Rollout> {
    const resource = create(ResourceSchema, {
      id: rollout.id,
      resourceType: "rollout",
      schemaVersion: SCHEMA_VERSION,
      desiredState: {
        kind: {
          case: "rollout",
          value: {
            tenantId: rollout.tenantId,
            fromSpecHash: rollout.fromSpecHash,
            toSpecHash: rollout.toSpecHash,
            agentUpdateId: rollout.agentUpdateId,
          },
        },
      },
      currentState: { kind: { case: "rollout", value: rollout } },
      metadata: { requestId: trace.requestId, correlationId: trace.correlationId, traceparent: trace.traceparent ?? "" },
      createdAt: rollout.createdAt,
      updatedAt: rollout.updatedAt,
    });
    const nodes = rollout.waves.reduce((n, w) => n + w.nodes.length, 0);
    const started: RolloutEventDraft = {
      type: "rollout_started",
      data: {
        from_spec_hash: rollout.fromSpecHash,
        to_spec_hash: rollout.toSpecHash,
        nodes,
        waves: rollout.waves.map((w) => `${w.name}:${w.nodes.length}`),
      },
    };
    try {
      // With rollout_started, in one write (store.ts EventsOf).
      await this.store.createResource(resource, (stored) => this.eventsOf(rollout, stored, trace, [started]));
    } catch (e) {
      if (!(isSkipperError(e) && e.code === "CONFLICT")) throw e;
      return (await this.get(rollout.id)) ?? rollout;
    }
    return rollout;
  }

  /** Stores `after` as the new state of its rollout, with the events that say what changed. */
  async save(after: Rollout, events: readonly RolloutEventDraft[], trace: Trace): Promise<Rollout> {
    let told = false;
    const stored = await this.store.updateResource(
      "rollout",
      after.id,
      (cur) => {
        const before = rolloutOf(cur);
        if (before && equals(RolloutSchema, before, after)) return cur;
        return writeStatus(
          cur,
          { case: "rollout", value: clone(RolloutSchema, after) },
          trace,
          after.updatedAt ?? timestampFromDate(new Date()),
        );
      },
      undefined,
      // The new state and its events in one write (store.ts EventsOf).
      (written) => {
        told = true;
        return this.eventsOf(after, written, trace, events);
      },
    );
    // A step that left the stored state as it was still says what happened (as its own write).
    if (!told && events.length > 0) await recordEvents(this.store, this.inputsOf(after, stored, trace, events));
    return rolloutOf(stored) ?? after;
  }

  /** Ends `rollout` as SUPERSEDED by `by` (when it is still under way). */
  async supersede(rollout: Rollout, by: string, trace: Trace, now: Date): Promise<void> {
    const after = clone(RolloutSchema, rollout);
    after.status = RolloutStatus.SUPERSEDED;
    after.supersededBy = by;
    after.message = by === "" ? "the desired state changed; no node runs an older spec" : `superseded by rollout ${by}`;
    after.finishedAt = timestampFromDate(now);
    after.updatedAt = after.finishedAt;
    await this.save(after, [{ type: "rollout_superseded", data: { superseded_by: by } }], trace);
  }

  private eventsOf(rollout: Rollout, stored: Resource, trace: Trace, drafts: readonly RolloutEventDraft[]): Event[] {
    return this.inputsOf(rollout, stored, trace, drafts).map(buildEvent);
  }

  private inputsOf(rollout: Rollout, stored: Resource, trace: Trace, drafts: readonly RolloutEventDraft[]): EventInput[] {
    return drafts.map((d) => ({
      type: d.type,
      ...trace,
      resourceType: "rollout",
      resourceId: rollout.id,
      tenantId: rollout.tenantId,
      nodeId: d.nodeId,
      workOrderId: d.workOrderId,
      revision: stored.metadata?.resourceVersion,
      data: { rollout_id: rollout.id, status: (RolloutStatus[rollout.status] ?? "").toLowerCase(), ...d.data },
    }));
  }
}
