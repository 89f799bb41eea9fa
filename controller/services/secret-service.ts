// SecretService: rotation of the keys that seal secrets at rest (resources/secret-rotation.ts).
import type { ServiceImpl } from "@connectrpc/connect";
import type { SecretService } from "../../gen/skipper/v1/secret_service_pb.js";
import { callInfo, responseMeta, traceOf } from "../base/context.js";
import { rotateSecretKeys } from "../resources/secret-rotation.js";
import { resealWebhooks } from "../webhooks/webhook-subscriptions.js";
import type { ServiceDeps } from "./deps.js";

/** Secret key management implementation. */
export function secretService(deps: ServiceDeps): ServiceImpl<typeof SecretService> {
  return {
    async rotateSecretKeys(_req, ctx) {
      const call = callInfo(ctx);
      call.audit.target = "secret_keys";
      // One rotation at a time across every controller on the store.
      const done = await deps.locks.run("secret-keys", () =>
        rotateSecretKeys(deps, traceOf(call), { webhooks: () => resealWebhooks(deps) }),
      );
      call.logger.warn(
        { action: "secret_keys_rotated", result: "ok", metadata: { key_id: done.keyId, resealed: done.resealed, retired: done.retired } },
        "secret keys rotated",
      );
      return {
        meta: responseMeta(ctx),
        keyId: done.keyId,
        resealedSecrets: done.resealed,
        resealedWebhooks: done.others.webhooks ?? 0,
        retiredKeyIds: done.retired,
      };
    },
  };
}
