// Builds and stores events. Every event carries the request and correlation ids of the call (or
// work order) that caused it, and its data is redacted before it is written.
import { parseTraceparent } from "../../common/trace-context.js";
import { create, type JsonObject } from "@bufbuild/protobuf";
import { TimestampSchema, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { v4 as uuidv4, v5 as uuidv5 } from "uuid";
import { EventSchema, type Event } from "../../gen/skipper/v1/event_pb.js";
import type { EventStore } from "../store/store.js";
import { redact } from "../../common/logging/redact.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";
import type { Actor } from "../../gen/skipper/v1/access_pb.js";
import { CONTROLLER_ACTOR } from "../auth/actor.js";

/** Event types the controller emits. */
export type EventType =
  | "resource_created"
  | "resource_updated"
  | "desired_state_changed"
  | "resource_deleted"
  | "drift_detected"
  | "data_delete_incomplete"
  | "convergence_changed"
  | "node_online"
  | "node_degraded"
  | "node_offline"
  | "work_order_created"
  | "work_order_started"
  | "work_order_lease_expired"
  | "work_order_claim_released"
  | "work_order_cancelled"
  | "work_order_retry_scheduled"
  | "work_order_cancel_requested"
  | "work_order_succeeded"
  | "work_order_failed"
  | "deployment_started"
  | "deployment_succeeded"
  | "deployment_failed"
  | "deployment_superseded"
  | "node_registered"
  | "node_token_rotated"
  | "node_enrolled"
  | "node_certificate_renewed"
  | "node_certificates_revoked"
  | "secret_keys_rotated"
  | "node_heartbeat_received"
  | "resource_state_reported"
  | "snapshot_created"
  | "terminal_opened"
  | "terminal_closed"
  // A process resource's reason on a node changed (reconcile/process-pass.ts).
  | "process_status_changed"
  | "agent_version_added"
  | "agent_update_status_changed"
  | RolloutEventType
  | DeliveryEventType;

/** What happens to releases (controller/delivery/, controller/promotion/): webhooks name them delivery.* and git_sync.*. */
export type DeliveryEventType =
  | "delivery_version_discovered"
  | "delivery_tag_moved"
  | "delivery_version_marked_bad"
  | "delivery_version_unmarked_bad"
  | "delivery_candidate_waiting"
  | "delivery_constraint_failed"
  | "delivery_promoted"
  | "delivery_demoted"
  | "delivery_verification_passed"
  | "delivery_verification_failed"
  | "delivery_release_verified"
  | "delivery_release_failed"
  | "delivery_release_approved"
  | "delivery_release_rejected"
  | "delivery_version_vetoed"
  | "delivery_environment_pinned"
  | "delivery_environment_unpinned"
  | "delivery_environment_held"
  | "git_sync_applied"
  | "git_sync_failed"
  | "git_sync_pruned"
  | "git_sync_drift_detected";

/** What happens to a rollout (controller/rollouts/): each step is an event of its own. */
export type RolloutEventType =
  | "rollout_started"
  | "rollout_superseded"
  | "rollout_wave_started"
  | "rollout_wave_completed"
  | "rollout_node_started"
  | "rollout_node_done"
  | "rollout_node_failed"
  | "rollout_node_skipped"
  | "rollout_node_rolled_back"
  | "rollout_budget_exhausted"
  | "rollout_paused"
  | "rollout_resumed"
  | "rollout_promoted"
  | "rollout_approved"
  | "rollout_aborted"
  | "rollout_rolled_back"
  | "rollout_failed"
  | "rollout_succeeded";

export interface EventInput {
  type: EventType;
  /** A fixed id makes recording idempotent (used for work-order transitions that may be replayed). */
  id?: string;
  requestId: string;
  correlationId: string;
  /** W3C trace context of what caused it: the event records its trace id. */
  traceparent?: string;
  resourceType?: string;
  resourceId?: string;
  tenantId?: string;
  nodeId?: string;
  workOrderId?: string;
  deploymentId?: string;
  data?: JsonObject;
  at?: Date;
  /** The store revision a resource mutation produced (its new resource_version). */
  revision?: string;
  /** Who caused it (unset: the controller itself). */
  actor?: Actor;
}

/** Creates an Event message (with a fresh id) from `input`. */
export function buildEvent(input: EventInput): Event {
  return create(EventSchema, {
    id: input.id ?? uuidv4(),
    type: input.type,
    schemaVersion: SCHEMA_VERSION,
    timestamp: input.at ? timestampFromDate(input.at) : nextEventTime(),
    resourceType: input.resourceType ?? "",
    resourceId: input.resourceId ?? "",
    tenantId: input.tenantId ?? "",
    nodeId: input.nodeId ?? "",
    workOrderId: input.workOrderId ?? "",
    deploymentId: input.deploymentId ?? "",
    requestId: input.requestId,
    correlationId: input.correlationId,
    data: redact(input.data ?? {}),
    revision: input.revision && /^\d{1,19}$/.test(input.revision) ? BigInt(input.revision) : 0n,
    actor: input.actor ?? CONTROLLER_ACTOR,
    traceId: parseTraceparent(input.traceparent)?.traceId ?? "",
  });
}

// Events list in (timestamp, id) order. Several events of one request fall in the same
// millisecond, so the clock is extended with a nanosecond counter: timestamps this process hands
// out only grow, and the listing keeps the order in which events were caused.
let lastNanos = 0n;

function nextEventTime(): Timestamp {
  const wall = BigInt(Date.now()) * 1_000_000n;
  lastNanos = wall > lastNanos ? wall : lastNanos + 1n;
  return create(TimestampSchema, { seconds: lastNanos / 1_000_000_000n, nanos: Number(lastNanos % 1_000_000_000n) });
}

/** Records events durably, in parallel. */
export async function recordEvents(store: EventStore, inputs: EventInput[]): Promise<Event[]> {
  const events = inputs.map(buildEvent);
  await Promise.all(events.map((e) => store.appendEvent(e)));
  return events;
}

// Namespace for deterministic event ids (uuid v5 of "<work order id>/<event type>").
const EVENT_NS = "5b0f4c1e-2d7a-4f0e-9a43-6c1d2b8e7f10";

/** A stable event id for a transition that may be recorded more than once (crash replay). */
export function transitionEventId(subjectId: string, type: EventType): string {
  return uuidv5(`${subjectId}/${type}`, EVENT_NS);
}
