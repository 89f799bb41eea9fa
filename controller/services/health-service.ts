// HealthService: liveness for load balancers, agents and humans (GET /health, GET /v1/health).
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HealthService } from "../../gen/skipper/v1/health_service_pb.js";
import { responseMeta } from "../base/context.js";
import type { ServiceDeps } from "./deps.js";

/** Health check implementation. */
export function healthService(deps: ServiceDeps): ServiceImpl<typeof HealthService> {
  return {
    check(_req, ctx) {
      return {
        meta: responseMeta(ctx),
        status: "ok",
        version: deps.version,
        store: deps.store.backend,
        startedAt: timestampFromDate(deps.startedAt),
        controllerId: deps.coordination.controllerId,
        leading: deps.coordination.leading,
      };
    },
  };
}
