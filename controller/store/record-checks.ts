// Checks of records on their way in that every backend makes alike.
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import { invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";

/** The event's timestamp (it dates the event: its day, its place in listings); INVALID_REQUEST when absent. */
export function eventTimestamp(event: Event): Timestamp {
  if (!event.timestamp) throw invalid("event timestamp is required", { field: "timestamp" });
  return event.timestamp;
}

/** The slot a snapshot of `scope` replaces: "system", or "tenant/<tenant id>"; INVALID_REQUEST for another scope. */
export function snapshotSlot(scope: string, tenantId: string): string {
  if (scope === "system") return "system";
  if (scope === "tenant") return `tenant/${checkId(tenantId, "tenant_id")}`;
  throw invalid(`snapshot scope must be "system" or "tenant": got ${JSON.stringify(scope.slice(0, 32))}`, { field: "scope" });
}
