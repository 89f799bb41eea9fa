// Events as the CLI shows them: a table (`skipper events`, `skipper describe`) or one line per
// event for `--follow`. The data an event carries is redacted by the controller already.
import type { JsonObject } from "@bufbuild/protobuf";
import { ActorKind, type Actor } from "../gen/skipper/v1/access_pb.js";
import { type Event, EventSchema } from "../gen/skipper/v1/event_pb.js";
import { asJson, cut, table, when } from "./output.js";

export const EVENT_HEAD = ["TIME", "TYPE", "RESOURCE", "NODE", "ACTOR", "DETAIL"];

/** One event's cells, in EVENT_HEAD's order. */
export function eventRow(e: Event): string[] {
  const resource = e.resourceType ? `${e.resourceType}/${e.resourceId}` : e.workOrderId ? `work_order/${e.workOrderId}` : "-";
  return [when(e.timestamp), e.type, resource, e.nodeId || "-", actorName(e.actor), detail(e)];
}

/** A table of events. */
export function eventTable(events: Event[]): string {
  return table(EVENT_HEAD, events.map(eventRow));
}

/** Who did it, shortly: admin, key:ci-web, node:host-1, controller. */
export function actorName(a: Actor | undefined): string {
  switch (a?.kind) {
    case ActorKind.ADMIN_TOKEN:
      return "admin";
    case ActorKind.API_KEY:
      return `key:${a.name || a.id}`;
    case ActorKind.NODE:
      return `node:${a.id}`;
    case ActorKind.CONTROLLER:
      return "controller";
    case ActorKind.ENROLLMENT:
      return `enrollment:${a.id}`;
    default:
      return "-";
  }
}

// The event's data, compact: a failure's cause first ("port 127.0.0.1:80 is already in use
// (COMPOSE_FAILED)"), else its message or reason when it has one.
function detail(e: Event): string {
  const data = (asJson(EventSchema, e) as JsonObject).data as JsonObject | undefined;
  if (!data || Object.keys(data).length === 0) return "";
  if (typeof data.cause === "string" && data.cause !== "") {
    const { cause, code, cause_line: _line, reason: _reason, ...others } = data;
    const head = typeof code === "string" && code !== "" ? `${cause} (${code})` : String(cause);
    return cut([head, Object.keys(others).length > 0 ? JSON.stringify(others) : ""].filter(Boolean).join(" "), 100);
  }
  const first = ["message", "reason", "code", "result_code", "status"].find((k) => typeof data[k] === "string");
  const rest = Object.fromEntries(Object.entries(data).filter(([k]) => k !== first));
  const head = first ? String(data[first]) : "";
  const tail = Object.keys(rest).length > 0 ? JSON.stringify(rest) : "";
  return cut([head, tail].filter(Boolean).join(" "), 100);
}
