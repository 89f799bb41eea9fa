// Resources as the end-to-end tests write them, and the wait every deploy test starts with.
import { create } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import { ConvergenceStatus, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { waitFor } from "./processes.js";

/** A resource of `type` whose desired state is `kind` (e.g. {case: "tenant", value: {...}}). */
export function res(type: string, id: string, kind: { case: string; value: object }): Resource {
  return create(ResourceSchema, { id, resourceType: type, desiredState: { kind } as never });
}

/** Resolves with the tenant once it is CONVERGED; throws after `timeoutMs`. */
export function tenantConverged(api: Client<typeof ResourceService>, tenantId: string, timeoutMs = 120_000): Promise<Resource> {
  return waitFor(
    `${tenantId} to converge`,
    async () => {
      const t = (await api.getResource({ resourceType: "tenant", id: tenantId })).resource!;
      return t.convergence?.status === ConvergenceStatus.CONVERGED ? t : undefined;
    },
    timeoutMs,
  );
}
