// A store that hands each call to the facet it belongs to: both backends (file/file-store.ts,
// postgres/pg-store.ts) are one of these, with their own facets, open() and close(). The
// hand-offs are methods of a class, so a test may subclass a backend and override one.
import type * as S from "./store.js";
import type { StoreArgs, StoreResult } from "./store.js";

/** One implementation per facet of Store (StoreLifecycle is the backend's own). */
export interface Facets {
  resources: S.ResourceStore;
  workOrders: S.WorkOrderStore;
  events: S.EventStore;
  snapshots: S.SnapshotStore;
  audit: S.AuditStore;
  idempotency: S.IdempotencyStore;
  credentials: S.CredentialStore;
  webhooks: S.WebhookStore;
}

/** A Store made of facets `F`; the backend opens and closes what they share. */
export abstract class FacetedStore<F extends Facets> implements S.Store {
  abstract readonly backend: string;

  constructor(protected readonly facets: F) {}

  abstract open(): Promise<void>;
  abstract close(): Promise<void>;

  getResource(...a: StoreArgs<"getResource">): StoreResult<"getResource"> {
    return this.facets.resources.getResource(...a);
  }

  resourceExists(...a: StoreArgs<"resourceExists">): StoreResult<"resourceExists"> {
    return this.facets.resources.resourceExists(...a);
  }

  listResources(...a: StoreArgs<"listResources">): StoreResult<"listResources"> {
    return this.facets.resources.listResources(...a);
  }

  scanResources(...a: StoreArgs<"scanResources">): StoreResult<"scanResources"> {
    return this.facets.resources.scanResources(...a);
  }

  currentRevision(...a: StoreArgs<"currentRevision">): StoreResult<"currentRevision"> {
    return this.facets.resources.currentRevision(...a);
  }

  createResource(...a: StoreArgs<"createResource">): StoreResult<"createResource"> {
    return this.facets.resources.createResource(...a);
  }

  updateResource(...a: StoreArgs<"updateResource">): StoreResult<"updateResource"> {
    return this.facets.resources.updateResource(...a);
  }

  pruneDeployments(...a: StoreArgs<"pruneDeployments">): StoreResult<"pruneDeployments"> {
    return this.facets.resources.pruneDeployments(...a);
  }

  // --- WorkOrderStore: workOrders ---

  createWorkOrder(...a: StoreArgs<"createWorkOrder">): StoreResult<"createWorkOrder"> {
    return this.facets.workOrders.createWorkOrder(...a);
  }

  getWorkOrder(...a: StoreArgs<"getWorkOrder">): StoreResult<"getWorkOrder"> {
    return this.facets.workOrders.getWorkOrder(...a);
  }

  listWorkOrders(...a: StoreArgs<"listWorkOrders">): StoreResult<"listWorkOrders"> {
    return this.facets.workOrders.listWorkOrders(...a);
  }

  pruneWorkOrders(...a: StoreArgs<"pruneWorkOrders">): StoreResult<"pruneWorkOrders"> {
    return this.facets.workOrders.pruneWorkOrders(...a);
  }

  nextPendingWorkOrder(...a: StoreArgs<"nextPendingWorkOrder">): StoreResult<"nextPendingWorkOrder"> {
    return this.facets.workOrders.nextPendingWorkOrder(...a);
  }

  countPendingWorkOrders(...a: StoreArgs<"countPendingWorkOrders">): StoreResult<"countPendingWorkOrders"> {
    return this.facets.workOrders.countPendingWorkOrders(...a);
  }

  pendingPoolOrders(...a: StoreArgs<"pendingPoolOrders">): StoreResult<"pendingPoolOrders"> {
    return this.facets.workOrders.pendingPoolOrders(...a);
  }

  countWorkOrders(...a: StoreArgs<"countWorkOrders">): StoreResult<"countWorkOrders"> {
    return this.facets.workOrders.countWorkOrders(...a);
  }

  claimWorkOrder(...a: StoreArgs<"claimWorkOrder">): StoreResult<"claimWorkOrder"> {
    return this.facets.workOrders.claimWorkOrder(...a);
  }

  renewWorkOrderLease(...a: StoreArgs<"renewWorkOrderLease">): StoreResult<"renewWorkOrderLease"> {
    return this.facets.workOrders.renewWorkOrderLease(...a);
  }

  expireWorkOrderLease(...a: StoreArgs<"expireWorkOrderLease">): StoreResult<"expireWorkOrderLease"> {
    return this.facets.workOrders.expireWorkOrderLease(...a);
  }

  releaseWorkOrderClaim(...a: StoreArgs<"releaseWorkOrderClaim">): StoreResult<"releaseWorkOrderClaim"> {
    return this.facets.workOrders.releaseWorkOrderClaim(...a);
  }

  cancelWorkOrder(...a: StoreArgs<"cancelWorkOrder">): StoreResult<"cancelWorkOrder"> {
    return this.facets.workOrders.cancelWorkOrder(...a);
  }

  releaseWorkOrderRetry(...a: StoreArgs<"releaseWorkOrderRetry">): StoreResult<"releaseWorkOrderRetry"> {
    return this.facets.workOrders.releaseWorkOrderRetry(...a);
  }

  finishWorkOrder(...a: StoreArgs<"finishWorkOrder">): StoreResult<"finishWorkOrder"> {
    return this.facets.workOrders.finishWorkOrder(...a);
  }

  supersedeWorkOrder(...a: StoreArgs<"supersedeWorkOrder">): StoreResult<"supersedeWorkOrder"> {
    return this.facets.workOrders.supersedeWorkOrder(...a);
  }

  // --- EventStore: events ---

  appendEvent(...a: StoreArgs<"appendEvent">): StoreResult<"appendEvent"> {
    return this.facets.events.appendEvent(...a);
  }

  listEvents(...a: StoreArgs<"listEvents">): StoreResult<"listEvents"> {
    return this.facets.events.listEvents(...a);
  }

  pruneEvents(...a: StoreArgs<"pruneEvents">): StoreResult<"pruneEvents"> {
    return this.facets.events.pruneEvents(...a);
  }

  // --- SnapshotStore: snapshots ---

  putSnapshot(...a: StoreArgs<"putSnapshot">): StoreResult<"putSnapshot"> {
    return this.facets.snapshots.putSnapshot(...a);
  }

  getLatestSnapshot(...a: StoreArgs<"getLatestSnapshot">): StoreResult<"getLatestSnapshot"> {
    return this.facets.snapshots.getLatestSnapshot(...a);
  }

  // --- AuditStore: audit ---

  appendAuditEntry(...a: StoreArgs<"appendAuditEntry">): StoreResult<"appendAuditEntry"> {
    return this.facets.audit.appendAuditEntry(...a);
  }

  listAuditEntries(...a: StoreArgs<"listAuditEntries">): StoreResult<"listAuditEntries"> {
    return this.facets.audit.listAuditEntries(...a);
  }

  scanAuditEntries(...a: StoreArgs<"scanAuditEntries">): StoreResult<"scanAuditEntries"> {
    return this.facets.audit.scanAuditEntries(...a);
  }

  pruneAuditEntries(...a: StoreArgs<"pruneAuditEntries">): StoreResult<"pruneAuditEntries"> {
    return this.facets.audit.pruneAuditEntries(...a);
  }

  // --- IdempotencyStore: idempotency ---

  getIdempotencyRecord(...a: StoreArgs<"getIdempotencyRecord">): StoreResult<"getIdempotencyRecord"> {
    return this.facets.idempotency.getIdempotencyRecord(...a);
  }

  putIdempotencyRecord(...a: StoreArgs<"putIdempotencyRecord">): StoreResult<"putIdempotencyRecord"> {
    return this.facets.idempotency.putIdempotencyRecord(...a);
  }

  // --- CredentialStore: credentials ---

  getNodeCredential(...a: StoreArgs<"getNodeCredential">): StoreResult<"getNodeCredential"> {
    return this.facets.credentials.getNodeCredential(...a);
  }

  getLiveNodeCredential(...a: StoreArgs<"getLiveNodeCredential">): StoreResult<"getLiveNodeCredential"> {
    return this.facets.credentials.getLiveNodeCredential(...a);
  }

  putNodeCredential(...a: StoreArgs<"putNodeCredential">): StoreResult<"putNodeCredential"> {
    return this.facets.credentials.putNodeCredential(...a);
  }

  getAdminCredential(...a: StoreArgs<"getAdminCredential">): StoreResult<"getAdminCredential"> {
    return this.facets.credentials.getAdminCredential(...a);
  }

  putAdminCredential(...a: StoreArgs<"putAdminCredential">): StoreResult<"putAdminCredential"> {
    return this.facets.credentials.putAdminCredential(...a);
  }

  getApiKey(...a: StoreArgs<"getApiKey">): StoreResult<"getApiKey"> {
    return this.facets.credentials.getApiKey(...a);
  }

  putApiKey(...a: StoreArgs<"putApiKey">): StoreResult<"putApiKey"> {
    return this.facets.credentials.putApiKey(...a);
  }

  listApiKeys(...a: StoreArgs<"listApiKeys">): StoreResult<"listApiKeys"> {
    return this.facets.credentials.listApiKeys(...a);
  }

  getEnrollmentToken(...a: StoreArgs<"getEnrollmentToken">): StoreResult<"getEnrollmentToken"> {
    return this.facets.credentials.getEnrollmentToken(...a);
  }

  putEnrollmentToken(...a: StoreArgs<"putEnrollmentToken">): StoreResult<"putEnrollmentToken"> {
    return this.facets.credentials.putEnrollmentToken(...a);
  }

  listEnrollmentTokens(...a: StoreArgs<"listEnrollmentTokens">): StoreResult<"listEnrollmentTokens"> {
    return this.facets.credentials.listEnrollmentTokens(...a);
  }

  // --- WebhookStore: webhooks ---

  putWebhook(...a: StoreArgs<"putWebhook">): StoreResult<"putWebhook"> {
    return this.facets.webhooks.putWebhook(...a);
  }

  getWebhook(...a: StoreArgs<"getWebhook">): StoreResult<"getWebhook"> {
    return this.facets.webhooks.getWebhook(...a);
  }

  listWebhooks(...a: StoreArgs<"listWebhooks">): StoreResult<"listWebhooks"> {
    return this.facets.webhooks.listWebhooks(...a);
  }

  deleteWebhook(...a: StoreArgs<"deleteWebhook">): StoreResult<"deleteWebhook"> {
    return this.facets.webhooks.deleteWebhook(...a);
  }

  enqueueWebhookDeliveries(...a: StoreArgs<"enqueueWebhookDeliveries">): StoreResult<"enqueueWebhookDeliveries"> {
    return this.facets.webhooks.enqueueWebhookDeliveries(...a);
  }

  getWebhookDelivery(...a: StoreArgs<"getWebhookDelivery">): StoreResult<"getWebhookDelivery"> {
    return this.facets.webhooks.getWebhookDelivery(...a);
  }

  updateWebhookDelivery(...a: StoreArgs<"updateWebhookDelivery">): StoreResult<"updateWebhookDelivery"> {
    return this.facets.webhooks.updateWebhookDelivery(...a);
  }

  listWebhookDeliveries(...a: StoreArgs<"listWebhookDeliveries">): StoreResult<"listWebhookDeliveries"> {
    return this.facets.webhooks.listWebhookDeliveries(...a);
  }

  dueWebhookDeliveries(...a: StoreArgs<"dueWebhookDeliveries">): StoreResult<"dueWebhookDeliveries"> {
    return this.facets.webhooks.dueWebhookDeliveries(...a);
  }

  webhookDeliveryStats(...a: StoreArgs<"webhookDeliveryStats">): StoreResult<"webhookDeliveryStats"> {
    return this.facets.webhooks.webhookDeliveryStats(...a);
  }

  pruneWebhookDeliveries(...a: StoreArgs<"pruneWebhookDeliveries">): StoreResult<"pruneWebhookDeliveries"> {
    return this.facets.webhooks.pruneWebhookDeliveries(...a);
  }

  getWebhookCursor(...a: StoreArgs<"getWebhookCursor">): StoreResult<"getWebhookCursor"> {
    return this.facets.webhooks.getWebhookCursor(...a);
  }

  putWebhookCursor(...a: StoreArgs<"putWebhookCursor">): StoreResult<"putWebhookCursor"> {
    return this.facets.webhooks.putWebhookCursor(...a);
  }
}
