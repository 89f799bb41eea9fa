// The Store interface: everything the controller persists goes through it, in facets (resources,
// work orders, events, snapshots, audit, idempotency, credentials, webhooks) composed into
// `Store`. The file store (file/) is the embedded default; the PostgreSQL store (postgres/)
// implements the same interface; both pass the same conformance suite (test/store-conformance.ts).
// How controllers sharing a store coordinate is apart from it: coordination.ts.
//
// Contract for every backend:
// - Objects are the generated contract messages (Resource, WorkOrder, Event, Snapshot).
// - Every acknowledged write is durable (survives kill -9 / power loss of the process).
// - Failures are SkipperError with a stable code (RESOURCE_NOT_FOUND, CONFLICT,
//   WORK_ORDER_NOT_CLAIMABLE, INVALID_REQUEST); callers never see backend-specific errors.
// - Ids passed in have already been validated (controller/base/id-checks.ts) but backends re-check them
//   before touching a path or a query, as defence in depth.
import type { JsonObject } from "@bufbuild/protobuf";
import type { DeploymentPhase, Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { WorkOrder, WorkOrderResult, WorkOrderStatus, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import type { Snapshot } from "../../gen/skipper/v1/snapshot_pb.js";
import type { ApiKey } from "../../gen/skipper/v1/access_pb.js";
import type { EnrollmentToken } from "../../gen/skipper/v1/enrollment_service_pb.js";
import type { AuditEntry } from "../../gen/skipper/v1/audit_service_pb.js";
import type { Webhook, WebhookDelivery, WebhookDeliveryState } from "../../gen/skipper/v1/webhook_service_pb.js";
import type { ResourceType } from "../../common/ids.js";
import type { LabelTerm } from "../domain/label-selector.js";
import type { StepOf } from "./step-writes.js";

export { stepWrites, type ResourceEdit, type StepOf, type StepWrites } from "./step-writes.js";

/**
 * The events of a change, made from the record as the store writes it (its resource_version, its
 * times): stored in the same step as the record, so a crash keeps both or neither (one
 * transaction on PostgreSQL, one group-committed log frame on the file store). Called once the
 * write is certain, and not at all when nothing is written (an update that changed nothing, a
 * check that threw). Appending an event whose id is stored already (on the UTC day of its
 * timestamp) is a no-op, as appendEvent's is.
 */
export type EventsOf<T> = (written: T) => Event[];

/** One page of a listing; `nextPageToken` is "" on the last page. */
export interface Page<T> {
  items: T[];
  nextPageToken: string;
}

/** Paging input shared by list calls. pageSize 0 means the default (100); the maximum is 1000. */
export interface PageRequest {
  pageSize?: number;
  pageToken?: string;
  /** Descending sort order (for work orders and events: newest first). A token resumes in the order it was made in. */
  newestFirst?: boolean;
}

export interface ResourceFilter extends PageRequest {
  resourceType?: ResourceType;
  /** The tenant itself and resources whose desired state names this tenant. */
  tenantId?: string;
  /** Only resources whose metadata labels satisfy every term. */
  labelSelector?: LabelTerm[];
  /** Include tombstones (resources with `deletion` set). */
  includeDeleted?: boolean;
  /**
   * Only resources whose id starts with this (with resourceType: read as a range of the type's
   * ids, so one artifact's versions, "web.", never scan another's).
   */
  idPrefix?: string;
  /** Only resources whose resource_version is greater than this revision. */
  sinceRevision?: bigint;
  /**
   * Only deployments whose current phase is one of these (no other type matches): start-up
   * recovery looks for the few unsettled ones among a long history without copying them all.
   */
  deploymentPhases?: DeploymentPhase[];
}

/** Options of single-resource reads. */
export interface GetOptions {
  /** Return a tombstone instead of undefined. */
  includeDeleted?: boolean;
}

export interface WorkOrderFilter extends PageRequest {
  status?: WorkOrderStatus;
  /** Only orders in one of these statuses, read at one instant (an order moving between two of them is listed once). */
  statuses?: readonly WorkOrderStatus[];
  nodeId?: string;
  tenantId?: string;
  /** Only orders with an expires_at at or before this time (the expiry sweep). */
  expiresBy?: Date;
  /**
   * Each order with only id, status, type, target, created_at, finished_at, expires_at and
   * desired_state.spec_hash/deployment_id set (what retention reads), so that a backend need not
   * read whole records of a long history.
   */
  summaryOnly?: boolean;
}

export interface EventFilter extends PageRequest {
  type?: string;
  tenantId?: string;
  resourceId?: string;
  workOrderId?: string;
  correlationId?: string;
  /** Only events with timestamp >= since. */
  since?: Date;
  /** Only events with revision > sinceRevision (resource mutations carry one). */
  sinceRevision?: bigint;
}

/** A stored response for an idempotency key (the key is already scoped and hashed by the caller). */
export interface IdempotencyRecord {
  key: string;
  /** SHA-256 of the canonical request; a different hash under the same key is a CONFLICT. */
  requestHash: string;
  /** The first response, as proto JSON, replayed for retries. */
  response: unknown;
  createdAt: Date;
  expiresAt: Date;
}

/** A node's credential: only the SHA-256 hash of its token is ever stored. */
export interface NodeCredential {
  nodeId: string;
  /** "" for a node that only ever enrolled (it has certificates, no token). */
  tokenHash: string;
  createdAt: Date;
  /** Client certificates issued to the node and still honoured (revocation empties the list). */
  certificates?: NodeCertificate[];
}

/** A client certificate issued to a node: what the authenticator checks a presented one against. */
export interface NodeCertificate {
  /** Uppercase hex, without leading zeros. */
  serial: string;
  notAfter: Date;
  /** How long it was issued for (its renewal gets as long). */
  lifetimeMs?: number;
  /**
   * Set when it was minted by a call made with the node's token (or renewed from one that was):
   * that token's hash. It holds only while the node's token is still that one.
   */
  underTokenHash?: string;
}

/** An enrollment token as stored: as the API shows it, and the SHA-256 hash of its secret. */
export interface EnrollmentTokenRecord {
  token: EnrollmentToken;
  secretHash: string;
}

/** The generated admin token's hash (used when SKIPPER_ADMIN_TOKEN is not set). */
export interface AdminCredential {
  tokenHash: string;
  createdAt: Date;
}

/** An API key as stored: the key as the API shows it, and the SHA-256 hashes of its secrets. */
export interface ApiKeyRecord {
  key: ApiKey;
  secretHash: string;
  /** The secret before the last rotation, valid until key.previous_secret_expires_at. */
  previousSecretHash?: string;
}

/** An audit entry before the store numbers and chains it. */
export type AuditDraft = Omit<AuditEntry, "sequence" | "previousHash" | "hash" | "$typeName" | "$unknown">;

/** Filter of audit listings: entries whose time is at or after `since` and before `until`. */
export interface AuditFilter extends PageRequest {
  since?: Date;
  until?: Date;
}

/** One stored audit entry exactly as kept (for verification), and where. */
export interface StoredAuditEntry {
  /** A file under the data directory and line number ("audit/2026-11-24.jsonl:17"), or a table row. */
  location: string;
  /** The stored text of the entry, unparsed. */
  text: string;
}

/** A webhook subscription as stored: as the API shows it (no status), and its sealed secrets. */
export interface WebhookRecord {
  webhook: Webhook;
  /** The URL, sealed by the key ring (context webhook/<id>/url). */
  sealedUrl: string;
  /** The shared secret, sealed (context webhook/<id>/secret). */
  sealedSecret: string;
}

/** A queued delivery: as the API shows it, and the event it carries (proto JSON, redacted already). */
export interface WebhookDeliveryRecord {
  delivery: WebhookDelivery;
  event: JsonObject;
  /** The work order of an agent's attempt in flight (node_selector); absent: none. Not in the API. */
  attemptOrderId?: string;
}

/** Filter of delivery listings (ordered by (created_at, id)). */
export interface WebhookDeliveryFilter extends PageRequest {
  webhookId?: string;
  state?: WebhookDeliveryState;
}

/** How a subscription's deliveries stand, from its stored deliveries. */
export interface WebhookDeliveryStats {
  backlog: number;
  deadLettered: number;
  lastSuccessAt?: Date;
  /** The latest failed attempt's time and outcome ("" when none). */
  lastFailureAt?: Date;
  lastFailure: string;
}

/** How many stored work orders have one status and type (countWorkOrders). */
export interface WorkOrderCount {
  status: WorkOrderStatus;
  type: WorkOrderType;
  count: number;
}

/** Result of finishing a work order; `duplicate` when it had already finished (nothing changed). */
export interface FinishOutcome {
  workOrder: WorkOrder;
  duplicate: boolean;
}

/** Which backend this is, and opening and closing it. */
export interface StoreLifecycle {
  /** Backend name reported by the health check, e.g. "file". */
  readonly backend: string;

  /** Prepares the store: creates the layout, removes leftover temp files, rebuilds indexes. */
  open(): Promise<void>;
  /** Flushes and releases the store (locks, handles). Idempotent. */
  close(): Promise<void>;
}

/** Resources: versioned records with tombstones, listed by type and id. */
export interface ResourceStore {
  /** The resource, or undefined; a deleted one (tombstone) only with includeDeleted. */
  getResource(type: ResourceType, id: string, options?: GetOptions): Promise<Resource | undefined>;
  /** True when the resource exists and is not deleted (cheaper than reading it: every node call asks). */
  resourceExists(type: ResourceType, id: string): Promise<boolean>;
  /** Resources ordered by (resource_type, id); tombstones only with includeDeleted. */
  listResources(filter: ResourceFilter): Promise<Page<Resource>>;
  /**
   * listResources for passes that only read: the items are frozen and may be the store's own
   * records, shared with every other reader, so they cost no copy. A change to one throws.
   */
  scanResources(filter: ResourceFilter): Promise<Page<Resource>>;
  /** The store revision: the highest resource_version assigned so far (0 when empty). */
  currentRevision(): Promise<bigint>;
  /**
   * Stores a new resource and assigns metadata.resource_version (a decimal store revision that
   * only grows). Throws CONFLICT when (type, id) exists, unless what exists is a tombstone, which
   * the new resource replaces. The caller sets timestamps. `events`: see EventsOf.
   */
  createResource(resource: Resource, events?: EventsOf<Resource>): Promise<Resource>;
  /**
   * Read-modify-write under the resource's lock: `mutate` receives a copy of the current
   * resource and returns the new one. When `expectedVersion` is given and differs from the
   * stored resource_version, throws CONFLICT (details: current_version) without calling mutate.
   * Throws RESOURCE_NOT_FOUND when absent. Assigns a new resource_version, unless mutate changed
   * nothing: then nothing is written and the stored resource comes back as it was. Tombstones can be
   * updated too (deleting is an update, and so is bookkeeping after it): callers that must not
   * touch a deleted resource check `deletion` in mutate. `events`: see EventsOf.
   */
  updateResource(
    type: ResourceType,
    id: string,
    mutate: (current: Resource) => Resource,
    expectedVersion?: string,
    events?: EventsOf<Resource>,
  ): Promise<Resource>;
  /**
   * Deletes for good (no tombstone: they are history) the deployments that ended (succeeded,
   * failed or superseded: ENDED_DEPLOYMENT_PHASES) before `finishedBefore`, except those whose id is in `keep`, and never the resource
   * holding the store's highest revision (the revision resumes from it). Returns how many.
   */
  pruneDeployments(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number>;
}

/** Work orders and the steps of their state machine (work-order-transitions.ts). */
export interface WorkOrderStore {
  /** Stores a new pending work order. Throws CONFLICT when the id exists. `events`: see EventsOf. */
  createWorkOrder(workOrder: WorkOrder, events?: EventsOf<WorkOrder>): Promise<WorkOrder>;
  getWorkOrder(id: string): Promise<WorkOrder | undefined>;
  /** Work orders ordered by (created_at, id). */
  listWorkOrders(filter: WorkOrderFilter): Promise<Page<WorkOrder>>;
  /**
   * Deletes the finished orders (SUCCESS, FAILED, CANCELLED) that finished before
   * `finishedBefore`, except those whose id is in `keep` (retention), from disk and from
   * listings; returns how many. Safe to repeat; other orders are never touched.
   */
  pruneWorkOrders(finishedBefore: Date, keep: ReadonlySet<string>): Promise<number>;
  /** The oldest pending work order targeted at `nodeId`, or undefined. */
  nextPendingWorkOrder(nodeId: string): Promise<WorkOrder | undefined>;
  /** Number of pending work orders targeted at `nodeId`. */
  countPendingWorkOrders(nodeId: string): Promise<number>;
  /** Up to `limit` pending pool orders (target.pool set, node_id empty), highest priority then oldest first; with `after`, those after it. */
  pendingPoolOrders(limit: number, after?: Pick<WorkOrder, "priority" | "createdAt" | "id">): Promise<WorkOrder[]>;
  /**
   * How many work orders are stored, per status and type (only pairs with at least one order),
   * without reading them: what the metrics scrape asks.
   */
  countWorkOrders(): Promise<WorkOrderCount[]>;
  /**
   * pending -> running for `nodeId`, atomically: of concurrent claims exactly one succeeds.
   * Sets status, claim, started_at and a pool order's target.node_id (emptied again when the claim
   * lapses or is released: back to the pool). Throws RESOURCE_NOT_FOUND, or
   * WORK_ORDER_NOT_CLAIMABLE (details: status, claimed_by) when the order is not pending.
   */
  claimWorkOrder(id: string, nodeId: string, now: Date, leaseMs?: number, events?: StepOf<WorkOrder>): Promise<WorkOrder>;
  /**
   * Extends the lease of a running order to now + leaseMs, for the node holding the claim with
   * `fencingToken`. Throws FORBIDDEN for another node, WORK_ORDER_NOT_CLAIMABLE when the order is
   * not running or the token is not the current claim's.
   */
  renewWorkOrderLease(id: string, nodeId: string, fencingToken: bigint, now: Date, leaseMs?: number): Promise<WorkOrder>;
  /**
   * running -> pending for an order whose lease lapsed at `now` (the attempt is kept as
   * lease_expired). Throws WORK_ORDER_NOT_CLAIMABLE when it is not running or its lease holds.
   */
  expireWorkOrderLease(id: string, now: Date, events?: StepOf<WorkOrder>): Promise<WorkOrder>;
  /**
   * running -> pending at once for the claim of `nodeId` under `fencingToken`, which its holder
   * gave up before taking the order (a session that pushed it ended unacknowledged); the attempt is
   * kept as released. Throws WORK_ORDER_NOT_CLAIMABLE unless the order runs under exactly that claim,
   * and, with `leaseAsPushed` (the lease the claim was handed out with), unless that lease was never
   * renewed: a renewal, through any controller, says its agent took the order.
   */
  releaseWorkOrderClaim(
    id: string,
    nodeId: string,
    fencingToken: bigint,
    now: Date,
    events?: StepOf<WorkOrder>,
    leaseAsPushed?: Date,
  ): Promise<WorkOrder>;
  /**
   * An admin's cancel (see transitions.cancelled): pending -> cancelled, running -> cancel
   * requested; idempotent. Throws RESOURCE_NOT_FOUND, or WORK_ORDER_NOT_CLAIMABLE once finished.
   * `events` (see EventsOf) are written only when this call changed the order.
   */
  cancelWorkOrder(id: string, reason: string, requestId: string, now: Date, events?: StepOf<WorkOrder>): Promise<WorkOrder>;
  /** retry_pending -> pending once next_attempt_at has come. WORK_ORDER_NOT_CLAIMABLE otherwise. */
  releaseWorkOrderRetry(id: string, now: Date): Promise<WorkOrder>;
  /**
   * running -> success | failed (from result.success), setting result and finished_at, or
   * running -> retry_pending for a retriable failure with attempts left (max_attempts). When the
   * order already finished, returns it unchanged with duplicate=true. A finished order (here, and
   * when superseded or cancelled) is stored without the secret values of its payload. Throws RESOURCE_NOT_FOUND,
   * FORBIDDEN when `nodeId` is not the claim holder, WORK_ORDER_NOT_CLAIMABLE when still pending
   * or when a non-zero `fencingToken` is not the current (or finishing) claim's. `events` (see
   * EventsOf) are written only when this call changed the order (not for a duplicate).
   */
  finishWorkOrder(
    id: string,
    nodeId: string,
    result: WorkOrderResult,
    now: Date,
    fencingToken?: bigint,
    events?: StepOf<WorkOrder>,
  ): Promise<FinishOutcome>;
  /**
   * pending -> `status` with `result`, for an order no node has claimed: cancelled when a newer one
   * replaces it, failed when it expired. Throws RESOURCE_NOT_FOUND, or WORK_ORDER_NOT_CLAIMABLE
   * when it is no longer pending. `events`: see EventsOf.
   */
  supersedeWorkOrder(
    id: string,
    result: WorkOrderResult,
    now: Date,
    status: WorkOrderStatus.CANCELLED | WorkOrderStatus.FAILED,
    events?: StepOf<WorkOrder>,
  ): Promise<WorkOrder>;
}

/** Events, append-only. */
export interface EventStore {
  /**
   * Appends an event; appending one again (the same id on the same UTC day of its timestamp) is
   * a no-op. A caller that may replay an event gives it a fixed id and the same timestamp.
   */
  appendEvent(event: Event): Promise<void>;
  /** Events ordered by (timestamp, id). */
  listEvents(filter: EventFilter): Promise<Page<Event>>;
  /**
   * Deletes every event older than `before` (retention), from disk and from listings; returns how
   * many. Safe to repeat; events recorded meanwhile with a newer timestamp are untouched.
   */
  pruneEvents(before: Date): Promise<number>;
}

/** The latest snapshot of each scope. */
export interface SnapshotStore {
  /** Replaces the latest snapshot of its scope ("system", or "tenant" with tenant_id). */
  putSnapshot(snapshot: Snapshot): Promise<void>;
  getLatestSnapshot(scope: "system" | "tenant", tenantId?: string): Promise<Snapshot | undefined>;
}

/** The audit trail: append-only, hash-chained (audit-chain.ts, docs/audit.md). */
export interface AuditStore {
  /**
   * Appends an entry: numbers it after the last one and chains it to that one's hash, atomically
   * across every controller on the store. Its time is the draft's, or the last entry's when that
   * is later (clocks differ), so time and UTC day never go back along the chain. Durable when it
   * returns.
   */
  appendAuditEntry(draft: AuditDraft): Promise<AuditEntry>;
  /** Entries in sequence order (parsed; entries that do not parse are skipped). */
  listAuditEntries(filter: AuditFilter): Promise<Page<AuditEntry>>;
  /** Every kept entry as stored, in sequence order, for verification. */
  scanAuditEntries(): AsyncIterable<StoredAuditEntry>;
  /**
   * Drops whole stored segments (UTC days) that hold only entries older than `before`, never the
   * day of the last entry (numbering and the chain go on from it); returns how many entries.
   */
  pruneAuditEntries(before: Date): Promise<number>;
}

/** Stored responses of idempotent requests. */
export interface IdempotencyStore {
  /** The unexpired record for `key`, or undefined (expired records are treated as absent). */
  getIdempotencyRecord(key: string, now: Date): Promise<IdempotencyRecord | undefined>;
  putIdempotencyRecord(record: IdempotencyRecord): Promise<void>;
}

/** Credentials: node tokens and certificates, the admin token, API keys, enrollment tokens (hashes only). */
export interface CredentialStore {
  getNodeCredential(nodeId: string): Promise<NodeCredential | undefined>;
  /**
   * The node's credential while its node resource exists (not deleted), else undefined: what the
   * authenticator asks on every node call, in one read.
   */
  getLiveNodeCredential(nodeId: string): Promise<NodeCredential | undefined>;
  /** Creates or replaces the node's credential (token rotation). */
  putNodeCredential(credential: NodeCredential): Promise<void>;
  getAdminCredential(): Promise<AdminCredential | undefined>;
  putAdminCredential(credential: AdminCredential): Promise<void>;
  getApiKey(id: string): Promise<ApiKeyRecord | undefined>;
  /** Creates or replaces a key (rotation, revocation). */
  putApiKey(record: ApiKeyRecord): Promise<void>;
  /** Every key ever created, revoked and expired ones too, oldest first. */
  listApiKeys(): Promise<ApiKeyRecord[]>;
  getEnrollmentToken(id: string): Promise<EnrollmentTokenRecord | undefined>;
  /** Creates or replaces an enrollment token (a use, a revocation). */
  putEnrollmentToken(record: EnrollmentTokenRecord): Promise<void>;
  /** Every enrollment token, oldest first. */
  listEnrollmentTokens(): Promise<EnrollmentTokenRecord[]>;
}

/** Webhook subscriptions, their queued deliveries and the dispatcher's cursor (controller/webhooks/). */
export interface WebhookStore {
  /** Creates or replaces a subscription. */
  putWebhook(record: WebhookRecord): Promise<void>;
  getWebhook(id: string): Promise<WebhookRecord | undefined>;
  /** Every subscription, oldest first. */
  listWebhooks(): Promise<WebhookRecord[]>;
  /** Removes a subscription and its deliveries; false when it did not exist. */
  deleteWebhook(id: string): Promise<boolean>;
  /** Stores the deliveries whose id is not stored yet (queueing an event again is a no-op); returns how many were new. */
  enqueueWebhookDeliveries(records: WebhookDeliveryRecord[]): Promise<number>;
  getWebhookDelivery(id: string): Promise<WebhookDeliveryRecord | undefined>;
  /** Replaces a stored delivery and its attempt in flight (absent: none), in one write; false when it is gone. */
  updateWebhookDelivery(delivery: WebhookDelivery, attemptOrderId?: string): Promise<boolean>;
  /** Deliveries ordered by (created_at, id). */
  listWebhookDeliveries(filter: WebhookDeliveryFilter): Promise<Page<WebhookDeliveryRecord>>;
  /** Up to `limit` pending deliveries whose next attempt is due at `now`, earliest first, except those of `skipWebhookIds`. */
  dueWebhookDeliveries(now: Date, limit: number, skipWebhookIds?: readonly string[]): Promise<WebhookDeliveryRecord[]>;
  webhookDeliveryStats(webhookId: string): Promise<WebhookDeliveryStats>;
  /** Deletes the delivered and dead-lettered deliveries created before `before` (retention); returns how many. Pending ones stay. */
  pruneWebhookDeliveries(before: Date): Promise<number>;
  /** How far the dispatcher has read the event history (the last event's timestamp it queued from). */
  getWebhookCursor(): Promise<Date | undefined>;
  putWebhookCursor(at: Date): Promise<void>;
}

/**
 * Everything the controller persists: the facets above, composed. A module that uses one facet
 * may ask for just that one (a `ResourceStore`, an `AuditStore`); every backend implements them all.
 */
export interface Store
  extends StoreLifecycle,
    ResourceStore,
    WorkOrderStore,
    EventStore,
    SnapshotStore,
    AuditStore,
    IdempotencyStore,
    CredentialStore,
    WebhookStore {}

/** A Store method's name (every member but `backend`). */
export type StoreMethod = Exclude<keyof Store, "backend">;
/** The arguments of a Store method, for a backend that hands the call on to one of its facets. */
export type StoreArgs<K extends StoreMethod> = Parameters<Store[K]>;
/** The result of a Store method (see StoreArgs). */
export type StoreResult<K extends StoreMethod> = ReturnType<Store[K]>;
