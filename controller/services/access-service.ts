// AccessService: API keys and the bootstrap admin token (the rules live in auth/api-keys.ts), and
// WhoAmI. Secrets are returned once and never go through idempotency records, events or logs.
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { callInfo, responseMeta } from "../base/context.js";
import { conflict } from "../base/errors.js";
import { createApiKey, DEFAULT_GRACE_MS, getApiKey, listApiKeys, revokeApiKey, rotateApiKey } from "../auth/api-keys.js";
import { hashToken, mintAdminToken } from "../auth/tokens.js";
import type { ServiceDeps } from "./deps.js";

/** Access management implementation. */
export function accessService(deps: ServiceDeps): ServiceImpl<typeof AccessService> {
  return {
    async whoAmI(_req, ctx) {
      const call = callInfo(ctx);
      const scope = call.principal.kind === "api_key" ? call.principal.scope : undefined;
      return { meta: responseMeta(ctx), actor: call.actor, scope };
    },

    async createApiKey(req, ctx) {
      const call = callInfo(ctx);
      const { key, secret } = await createApiKey(deps, {
        name: req.name,
        role: req.role,
        scope: req.scope,
        expiresAt: req.expiresAt,
        createdBy: call.actor,
      });
      call.audit.target = `api_key/${key.id}`;
      call.logger.info({ action: "api_key_created", result: "ok", metadata: { key_id: key.id, name: key.name } }, "API key created");
      return { meta: responseMeta(ctx), apiKey: key, secret };
    },

    async listApiKeys(req, ctx) {
      return { meta: responseMeta(ctx), apiKeys: await listApiKeys(deps, req.includeInactive) };
    },

    async getApiKey(req, ctx) {
      return { meta: responseMeta(ctx), apiKey: await getApiKey(deps, req.id) };
    },

    async rotateApiKey(req, ctx) {
      const call = callInfo(ctx);
      call.audit.target = `api_key/${req.id}`;
      const graceMs = req.gracePeriod ? Number(req.gracePeriod.seconds) * 1000 + Math.floor(req.gracePeriod.nanos / 1e6) : DEFAULT_GRACE_MS;
      const { key, secret } = await rotateApiKey(deps, req.id, graceMs);
      deps.credentialEnds.changed(`api_key:${key.id}`);
      const until = key.previousSecretExpiresAt ? timestampDate(key.previousSecretExpiresAt).toISOString() : "";
      call.logger.info(
        { action: "api_key_rotated", result: "ok", metadata: { key_id: key.id, old_secret_until: until } },
        "API key rotated",
      );
      return { meta: responseMeta(ctx), apiKey: key, secret };
    },

    async revokeApiKey(req, ctx) {
      const call = callInfo(ctx);
      call.audit.target = `api_key/${req.id}`;
      const { key, changed } = await revokeApiKey(deps, req.id);
      // Streams the key opened end now (its event watches), on every controller.
      deps.credentialEnds.changed(`api_key:${key.id}`);
      if (changed)
        call.logger.info(
          { action: "api_key_revoked", result: "ok", metadata: { key_id: key.id, reason: req.reason.slice(0, 200) } },
          "API key revoked",
        );
      return { meta: responseMeta(ctx), apiKey: key };
    },

    async rotateAdminToken(_req, ctx) {
      const call = callInfo(ctx);
      call.audit.target = "admin_token";
      if (deps.adminTokenFixed) {
        throw conflict("the admin token is set by SKIPPER_ADMIN_TOKEN; change it there and restart", { reason: "configured" });
      }
      const token = mintAdminToken();
      await deps.store.putAdminCredential({ tokenHash: hashToken(token), createdAt: deps.now() });
      call.logger.warn({ action: "admin_token_rotated", result: "ok" }, "admin token rotated; the old one is refused from now on");
      return { meta: responseMeta(ctx), adminToken: token };
    },
  };
}
