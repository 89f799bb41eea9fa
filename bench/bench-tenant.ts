// The tenant each benchmark client works on. Shared by the controller phases and the echo server,
// so the echo ceiling for reads returns a message of the same shape and size as a real read.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { MetadataSchema, ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";

export function benchTenant(w: number, k?: number): Resource {
  return create(ResourceSchema, {
    id: k === undefined ? `bench-tenant-${w}` : `bench-tenant-${w}-${k}`,
    resourceType: "tenant",
    desiredState: {
      kind: {
        case: "tenant",
        value: {
          displayName: `Bench tenant ${w}`,
          deploymentPolicy: { targetNodeId: `bench-node-${w}` },
          compose: {
            projectName: `bench-${w}`,
            composeFile: "services:\n  web:\n    image: busybox:stable\n    command: [httpd, -f, -p, '8080']\n",
          },
        },
      },
    },
  });
}

/** What the controller returns for benchTenant(w) once stored: the same plus metadata and times. */
export function storedBenchTenant(w: number): Resource {
  const r = benchTenant(w);
  const now = timestampFromDate(new Date());
  r.schemaVersion = "v1";
  const traceId = "00000000-0000-4000-8000-000000000000";
  r.metadata = create(MetadataSchema, { resourceVersion: String(w + 1), requestId: traceId, correlationId: traceId });
  r.createdAt = now;
  r.updatedAt = now;
  return r;
}
