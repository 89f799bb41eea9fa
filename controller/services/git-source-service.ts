// GitSourceService: sync a Git source now (CI after a push, or a relay of a forge's webhook). Thin:
// decode, authorize, one domain call (promotion/git-sync.ts), encode. A git_source is the fleet's:
// the caller's scope must be every tenant. The sync's own failure is in the source's status, not
// an error of the call.
import type { ServiceImpl } from "@connectrpc/connect";
import type { GitSourceService } from "../../gen/skipper/v1/git_source_service_pb.js";
import { ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import { redactMessage } from "../../common/logging/redact-message.js";
import { seesSecrets } from "../auth/resource-access.js";
import { callInfo, responseMeta, traceOf } from "../base/context.js";
import { checkId } from "../base/id-checks.js";
import type { ServiceDeps } from "./deps.js";

/** GitSourceService implementation. */
export function gitSourceService(deps: ServiceDeps): ServiceImpl<typeof GitSourceService> {
  return {
    async syncGitSource(req, ctx) {
      const call = callInfo(ctx);
      const id = checkId(req.id, "id");
      await call.tenants.require(undefined);
      call.audit.target = `git_source/${id}`;
      const { source, ok } = await deps.gitSync.sync(id, { reapply: req.reapply, trace: traceOf(call) });
      call.logger.info(
        { action: "git_source_synced", result: ok ? "ok" : "error", metadata: { git_source: id, reapply: req.reapply } },
        ok ? "git source synced" : "git source sync stopped (see its status)",
      );
      const shown = seesSecrets(call) ? source : redactMessage(ResourceSchema, source, { inlineEnv: true });
      return { meta: responseMeta(ctx), gitSource: shown };
    },
  };
}
