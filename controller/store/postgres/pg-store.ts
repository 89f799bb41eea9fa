// The PostgreSQL store (backend "postgres"): the same Store contract as the file store, on a
// database that several controllers can share. Every write is committed before the call returns
// (synchronous_commit, the default, makes that durable). Rows are locked, not processes: a
// resource write locks its row (pg-resources.ts, with the revision gate that keeps versions in
// commit order); a work-order step writes its row only if it is still the one it read
// (pg-work-orders.ts); an audit append takes a lock of its own (pg-audit.ts).
//
// PostgresStore opens and closes the pool (pg-database.ts, shared by the facets) and hands each
// call to the facet it belongs to: pg-resources.ts, pg-work-orders.ts, pg-events.ts,
// pg-snapshots.ts, pg-audit.ts, pg-idempotency.ts, pg-credentials.ts, pg-webhooks.ts.
import type * as S from "../store.js";
import type { StoreArgs, StoreResult } from "../store.js";
import { PgAudit } from "./pg-audit.js";
import { PgCredentials } from "./pg-credentials.js";
import { PgDatabase, type PostgresStoreOptions } from "./pg-database.js";
import { PgEvents } from "./pg-events.js";
import { PgIdempotency } from "./pg-idempotency.js";
import { PgResources } from "./pg-resources.js";
import { PgSnapshots } from "./pg-snapshots.js";
import { PgWebhooks } from "./pg-webhooks.js";
import { PgWorkOrders } from "./pg-work-orders.js";

export type { PostgresStoreOptions } from "./pg-database.js";

/** The PostgreSQL-backed Store. */
export class PostgresStore implements S.Store {
  readonly backend = "postgres";
  private readonly db: PgDatabase;
  private readonly resources: PgResources;
  private readonly workOrders: PgWorkOrders;
  private readonly events: PgEvents;
  private readonly snapshots: PgSnapshots;
  private readonly audit: PgAudit;
  private readonly idempotency: PgIdempotency;
  private readonly credentials: PgCredentials;
  private readonly webhooks: PgWebhooks;

  constructor(url: string, options: PostgresStoreOptions = {}) {
    this.db = new PgDatabase(url, options);
    this.resources = new PgResources(this.db);
    this.workOrders = new PgWorkOrders(this.db);
    this.events = new PgEvents(this.db);
    this.snapshots = new PgSnapshots(this.db);
    this.audit = new PgAudit(this.db);
    this.idempotency = new PgIdempotency(this.db);
    this.credentials = new PgCredentials(this.db);
    this.webhooks = new PgWebhooks(this.db);
  }

  /** Connects and brings the schema up to date (under an advisory lock: see migrations.ts). */
  open(): Promise<void> {
    return this.db.open();
  }

  /** Waits for calls in flight, then closes the pool. Idempotent. */
  close(): Promise<void> {
    return this.db.close();
  }

  // --- ResourceStore: resources ---

  getResource(...a: StoreArgs<"getResource">): StoreResult<"getResource"> {
    return this.resources.getResource(...a);
  }

  resourceExists(...a: StoreArgs<"resourceExists">): StoreResult<"resourceExists"> {
    return this.resources.resourceExists(...a);
  }

  listResources(...a: StoreArgs<"listResources">): StoreResult<"listResources"> {
    return this.resources.listResources(...a);
  }

  scanResources(...a: StoreArgs<"scanResources">): StoreResult<"scanResources"> {
    return this.resources.scanResources(...a);
  }

  currentRevision(...a: StoreArgs<"currentRevision">): StoreResult<"currentRevision"> {
    return this.resources.currentRevision(...a);
  }

  createResource(...a: StoreArgs<"createResource">): StoreResult<"createResource"> {
    return this.resources.createResource(...a);
  }

  updateResource(...a: StoreArgs<"updateResource">): StoreResult<"updateResource"> {
    return this.resources.updateResource(...a);
  }

  pruneDeployments(...a: StoreArgs<"pruneDeployments">): StoreResult<"pruneDeployments"> {
    return this.resources.pruneDeployments(...a);
  }

  // --- WorkOrderStore: workOrders ---

  createWorkOrder(...a: StoreArgs<"createWorkOrder">): StoreResult<"createWorkOrder"> {
    return this.workOrders.createWorkOrder(...a);
  }

  getWorkOrder(...a: StoreArgs<"getWorkOrder">): StoreResult<"getWorkOrder"> {
    return this.workOrders.getWorkOrder(...a);
  }

  listWorkOrders(...a: StoreArgs<"listWorkOrders">): StoreResult<"listWorkOrders"> {
    return this.workOrders.listWorkOrders(...a);
  }

  pruneWorkOrders(...a: StoreArgs<"pruneWorkOrders">): StoreResult<"pruneWorkOrders"> {
    return this.workOrders.pruneWorkOrders(...a);
  }

  nextPendingWorkOrder(...a: StoreArgs<"nextPendingWorkOrder">): StoreResult<"nextPendingWorkOrder"> {
    return this.workOrders.nextPendingWorkOrder(...a);
  }

  countPendingWorkOrders(...a: StoreArgs<"countPendingWorkOrders">): StoreResult<"countPendingWorkOrders"> {
    return this.workOrders.countPendingWorkOrders(...a);
  }

  countWorkOrders(...a: StoreArgs<"countWorkOrders">): StoreResult<"countWorkOrders"> {
    return this.workOrders.countWorkOrders(...a);
  }

  claimWorkOrder(...a: StoreArgs<"claimWorkOrder">): StoreResult<"claimWorkOrder"> {
    return this.workOrders.claimWorkOrder(...a);
  }

  renewWorkOrderLease(...a: StoreArgs<"renewWorkOrderLease">): StoreResult<"renewWorkOrderLease"> {
    return this.workOrders.renewWorkOrderLease(...a);
  }

  expireWorkOrderLease(...a: StoreArgs<"expireWorkOrderLease">): StoreResult<"expireWorkOrderLease"> {
    return this.workOrders.expireWorkOrderLease(...a);
  }

  cancelWorkOrder(...a: StoreArgs<"cancelWorkOrder">): StoreResult<"cancelWorkOrder"> {
    return this.workOrders.cancelWorkOrder(...a);
  }

  releaseWorkOrderRetry(...a: StoreArgs<"releaseWorkOrderRetry">): StoreResult<"releaseWorkOrderRetry"> {
    return this.workOrders.releaseWorkOrderRetry(...a);
  }

  finishWorkOrder(...a: StoreArgs<"finishWorkOrder">): StoreResult<"finishWorkOrder"> {
    return this.workOrders.finishWorkOrder(...a);
  }

  supersedeWorkOrder(...a: StoreArgs<"supersedeWorkOrder">): StoreResult<"supersedeWorkOrder"> {
    return this.workOrders.supersedeWorkOrder(...a);
  }

  // --- EventStore: events ---

  appendEvent(...a: StoreArgs<"appendEvent">): StoreResult<"appendEvent"> {
    return this.events.appendEvent(...a);
  }

  listEvents(...a: StoreArgs<"listEvents">): StoreResult<"listEvents"> {
    return this.events.listEvents(...a);
  }

  pruneEvents(...a: StoreArgs<"pruneEvents">): StoreResult<"pruneEvents"> {
    return this.events.pruneEvents(...a);
  }

  // --- SnapshotStore: snapshots ---

  putSnapshot(...a: StoreArgs<"putSnapshot">): StoreResult<"putSnapshot"> {
    return this.snapshots.putSnapshot(...a);
  }

  getLatestSnapshot(...a: StoreArgs<"getLatestSnapshot">): StoreResult<"getLatestSnapshot"> {
    return this.snapshots.getLatestSnapshot(...a);
  }

  // --- AuditStore: audit ---

  appendAuditEntry(...a: StoreArgs<"appendAuditEntry">): StoreResult<"appendAuditEntry"> {
    return this.audit.appendAuditEntry(...a);
  }

  listAuditEntries(...a: StoreArgs<"listAuditEntries">): StoreResult<"listAuditEntries"> {
    return this.audit.listAuditEntries(...a);
  }

  scanAuditEntries(...a: StoreArgs<"scanAuditEntries">): StoreResult<"scanAuditEntries"> {
    return this.audit.scanAuditEntries(...a);
  }

  pruneAuditEntries(...a: StoreArgs<"pruneAuditEntries">): StoreResult<"pruneAuditEntries"> {
    return this.audit.pruneAuditEntries(...a);
  }

  // --- IdempotencyStore: idempotency ---

  getIdempotencyRecord(...a: StoreArgs<"getIdempotencyRecord">): StoreResult<"getIdempotencyRecord"> {
    return this.idempotency.getIdempotencyRecord(...a);
  }

  putIdempotencyRecord(...a: StoreArgs<"putIdempotencyRecord">): StoreResult<"putIdempotencyRecord"> {
    return this.idempotency.putIdempotencyRecord(...a);
  }

  // --- CredentialStore: credentials ---

  getNodeCredential(...a: StoreArgs<"getNodeCredential">): StoreResult<"getNodeCredential"> {
    return this.credentials.getNodeCredential(...a);
  }

  getLiveNodeCredential(...a: StoreArgs<"getLiveNodeCredential">): StoreResult<"getLiveNodeCredential"> {
    return this.credentials.getLiveNodeCredential(...a);
  }

  putNodeCredential(...a: StoreArgs<"putNodeCredential">): StoreResult<"putNodeCredential"> {
    return this.credentials.putNodeCredential(...a);
  }

  getAdminCredential(...a: StoreArgs<"getAdminCredential">): StoreResult<"getAdminCredential"> {
    return this.credentials.getAdminCredential(...a);
  }

  putAdminCredential(...a: StoreArgs<"putAdminCredential">): StoreResult<"putAdminCredential"> {
    return this.credentials.putAdminCredential(...a);
  }

  getApiKey(...a: StoreArgs<"getApiKey">): StoreResult<"getApiKey"> {
    return this.credentials.getApiKey(...a);
  }

  putApiKey(...a: StoreArgs<"putApiKey">): StoreResult<"putApiKey"> {
    return this.credentials.putApiKey(...a);
  }

  listApiKeys(...a: StoreArgs<"listApiKeys">): StoreResult<"listApiKeys"> {
    return this.credentials.listApiKeys(...a);
  }

  getEnrollmentToken(...a: StoreArgs<"getEnrollmentToken">): StoreResult<"getEnrollmentToken"> {
    return this.credentials.getEnrollmentToken(...a);
  }

  putEnrollmentToken(...a: StoreArgs<"putEnrollmentToken">): StoreResult<"putEnrollmentToken"> {
    return this.credentials.putEnrollmentToken(...a);
  }

  listEnrollmentTokens(...a: StoreArgs<"listEnrollmentTokens">): StoreResult<"listEnrollmentTokens"> {
    return this.credentials.listEnrollmentTokens(...a);
  }

  // --- WebhookStore: webhooks ---

  putWebhook(...a: StoreArgs<"putWebhook">): StoreResult<"putWebhook"> {
    return this.webhooks.putWebhook(...a);
  }

  getWebhook(...a: StoreArgs<"getWebhook">): StoreResult<"getWebhook"> {
    return this.webhooks.getWebhook(...a);
  }

  listWebhooks(...a: StoreArgs<"listWebhooks">): StoreResult<"listWebhooks"> {
    return this.webhooks.listWebhooks(...a);
  }

  deleteWebhook(...a: StoreArgs<"deleteWebhook">): StoreResult<"deleteWebhook"> {
    return this.webhooks.deleteWebhook(...a);
  }

  enqueueWebhookDeliveries(...a: StoreArgs<"enqueueWebhookDeliveries">): StoreResult<"enqueueWebhookDeliveries"> {
    return this.webhooks.enqueueWebhookDeliveries(...a);
  }

  getWebhookDelivery(...a: StoreArgs<"getWebhookDelivery">): StoreResult<"getWebhookDelivery"> {
    return this.webhooks.getWebhookDelivery(...a);
  }

  updateWebhookDelivery(...a: StoreArgs<"updateWebhookDelivery">): StoreResult<"updateWebhookDelivery"> {
    return this.webhooks.updateWebhookDelivery(...a);
  }

  listWebhookDeliveries(...a: StoreArgs<"listWebhookDeliveries">): StoreResult<"listWebhookDeliveries"> {
    return this.webhooks.listWebhookDeliveries(...a);
  }

  dueWebhookDeliveries(...a: StoreArgs<"dueWebhookDeliveries">): StoreResult<"dueWebhookDeliveries"> {
    return this.webhooks.dueWebhookDeliveries(...a);
  }

  webhookDeliveryStats(...a: StoreArgs<"webhookDeliveryStats">): StoreResult<"webhookDeliveryStats"> {
    return this.webhooks.webhookDeliveryStats(...a);
  }

  pruneWebhookDeliveries(...a: StoreArgs<"pruneWebhookDeliveries">): StoreResult<"pruneWebhookDeliveries"> {
    return this.webhooks.pruneWebhookDeliveries(...a);
  }

  getWebhookCursor(...a: StoreArgs<"getWebhookCursor">): StoreResult<"getWebhookCursor"> {
    return this.webhooks.getWebhookCursor(...a);
  }

  putWebhookCursor(...a: StoreArgs<"putWebhookCursor">): StoreResult<"putWebhookCursor"> {
    return this.webhooks.putWebhookCursor(...a);
  }
}
