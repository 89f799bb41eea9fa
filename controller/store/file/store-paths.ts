// Every path the file store touches is built here. Ids were validated at the API boundary, but
// a path is where a bad id would do damage (traversal, NUL, odd encodings), so each id is checked
// again and the resolved path must stay inside the data directory.
import { isAbsolute, relative, resolve, sep } from "node:path";
import { invalid } from "../../base/errors.js";
import { RESOURCE_KINDS, RESOURCE_TYPES, type ResourceType } from "../../../common/resource-kinds.js";
import { checkId, checkResourceType } from "../../base/id-checks.js";
import { eventDay } from "../record-keys.js";

/** Idempotency keys are hex digests computed by the caller. */
export const IDEMPOTENCY_KEY_PATTERN = /^[a-f0-9]{16,128}$/;

/** Directories where a work order file lives, by lifecycle stage. */
export type OrderDir = "pending" | "running" | "finished";
export const ORDER_DIRS: readonly OrderDir[] = ["pending", "running", "finished"];

/**
 * The directory under resources/ of a type's records (tenant -> tenants, resource_limits ->
 * resource-limits: its kind's `dir`). Layout 1 used the type name itself (resources/tenant/);
 * layout-migration.ts moves those.
 */
export function resourceDir(type: ResourceType): string {
  return RESOURCE_KINDS[type].dir;
}

/** Directories created at open (relative to the data dir, parents first). */
export const LAYOUT = [
  "resources",
  ...RESOURCE_TYPES.map((t) => `resources/${resourceDir(t)}`),
  "work-orders",
  ...ORDER_DIRS.map((d) => `work-orders/${d}`),
  "events",
  "snapshots",
  "snapshots/system",
  "snapshots/tenants",
  "idempotency",
  "auth",
  "auth/nodes",
  "auth/keys",
  "auth/enrollment",
  "webhooks",
  "webhooks/subscriptions",
  "webhooks/deliveries",
  "audit",
  "logs",
  "quarantine",
] as const;

/** An event's file name in its day directory: <compact ts>-<id>.json (20261122T101500123Z-<id>.json). */
export function eventFileName(at: Date, id: string): string {
  return `${at.toISOString().replace(/[-:.]/g, "")}-${id}.json`;
}

/** Builds validated, contained paths under one data directory. */
export class StorePaths {
  readonly root: string;

  constructor(dataDir: string) {
    this.root = resolve(dataDir);
  }

  /** resources/<type's directory>/<id>.json (resourceDir: resources/tenants/<id>.json). */
  resource(type: ResourceType, id: string): string {
    return this.inside("resources", this.typeDir(type), `${this.id(id, "resource_id")}.json`);
  }

  /** resources/<type's directory>, where a type's records live. */
  resourceDir(type: ResourceType): string {
    return this.inside("resources", this.typeDir(type));
  }

  /** work-orders/<dir>/<id>.json */
  workOrder(dir: OrderDir, id: string): string {
    return this.inside("work-orders", dir, `${this.id(id, "work_order_id")}.json`);
  }

  /** events/YYYY-MM-DD/<compact ts>-<id>.json, dated by the event's own UTC timestamp. */
  event(at: Date, id: string): string {
    if (Number.isNaN(at.getTime())) throw invalid("event timestamp is not a valid date", { field: "timestamp" });
    return this.inside("events", eventDay(at), eventFileName(at, this.id(id, "event_id")));
  }

  /** snapshots/system/latest.json */
  systemSnapshot(): string {
    return this.inside("snapshots", "system", "latest.json");
  }

  /** snapshots/tenants/<tenant_id>.json */
  tenantSnapshot(tenantId: string): string {
    return this.inside("snapshots", "tenants", `${this.id(tenantId, "tenant_id")}.json`);
  }

  /** idempotency/<key>.json */
  idempotency(key: string): string {
    if (!IDEMPOTENCY_KEY_PATTERN.test(key)) throw invalid("idempotency key must be a lowercase hex digest", { field: "key" });
    return this.inside("idempotency", `${key}.json`);
  }

  /** auth/nodes/<node_id>.json */
  nodeCredential(nodeId: string): string {
    return this.inside("auth", "nodes", `${this.id(nodeId, "node_id")}.json`);
  }

  /** auth/keys/<key id>.json */
  apiKey(id: string): string {
    return this.inside("auth", "keys", `${this.id(id, "id")}.json`);
  }

  /** webhooks/subscriptions/<webhook id>.json */
  webhook(id: string): string {
    return this.inside("webhooks", "subscriptions", `${this.id(id, "id")}.json`);
  }

  /** webhooks/deliveries/<delivery id>.json */
  webhookDelivery(id: string): string {
    return this.inside("webhooks", "deliveries", `${this.id(id, "id")}.json`);
  }

  /** webhooks/cursor.json: how far the dispatcher has read the events. */
  webhookCursor(): string {
    return this.inside("webhooks", "cursor.json");
  }

  /** auth/enrollment/<token id>.json */
  enrollmentToken(id: string): string {
    return this.inside("auth", "enrollment", `${this.id(id, "id")}.json`);
  }

  /** auth/admin.json */
  adminCredential(): string {
    return this.inside("auth", "admin.json");
  }

  /** The data-directory lock file. */
  lock(): string {
    return this.inside(".lock");
  }

  /** A directory of the layout, or a path below it. */
  dir(...segments: string[]): string {
    return this.inside(...segments);
  }

  private typeDir(type: ResourceType): string {
    return resourceDir(checkResourceType(type));
  }

  private id(id: string, field: string): string {
    // A non-string (from a decoded record) fails as an empty id would.
    return checkId(typeof id === "string" ? id : "", field);
  }

  // Resolves and refuses anything that escapes the root, whatever slipped through above.
  private inside(...segments: string[]): string {
    const p = resolve(this.root, ...segments);
    const rel = relative(this.root, p);
    if (rel === "" || rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel) || p.includes("\0")) {
      throw invalid("path escapes the data directory", { field: "path" });
    }
    return p;
  }
}
