// One place for what every owner of a controller-written status does when it writes one: the
// status in current_state, the time, and the ids of the call (or pass) that wrote it, so a reader
// of the record can follow it to its request and trace.
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Resource, ResourceStatus } from "../../gen/skipper/v1/resource_pb.js";
import type { Trace } from "../base/context.js";

/** Puts `kind` in `r`'s current_state, dated `at`, with `trace`'s ids; returns `r` (changed in place). */
export function writeStatus(r: Resource, kind: ResourceStatus["kind"], trace: Trace, at: Timestamp): Resource {
  r.currentState = { $typeName: "skipper.v1.ResourceStatus", kind };
  r.updatedAt = at;
  if (r.metadata)
    Object.assign(r.metadata, { requestId: trace.requestId, correlationId: trace.correlationId, traceparent: trace.traceparent ?? "" });
  return r;
}
