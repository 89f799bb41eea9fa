// WebhookService: subscriptions and their deliveries (controller/webhooks/). The URL and the
// shared secret go in and are sealed; only the URL's host, and a generated secret once, come out.
import type { ServiceImpl } from "@connectrpc/connect";
import type { WebhookService } from "../../gen/skipper/v1/webhook_service_pb.js";
import { callInfo, responseMeta } from "../base/context.js";
import {
  createWebhook,
  deleteWebhook,
  getWebhook,
  listDeliveries,
  listWebhooks,
  redeliver,
  updateWebhook,
} from "../webhooks/webhook-subscriptions.js";
import type { ServiceDeps } from "./deps.js";

/** Webhook implementation. */
export function webhookService(deps: ServiceDeps): ServiceImpl<typeof WebhookService> {
  return {
    async createWebhook(req, ctx) {
      const created = await createWebhook(deps, {
        url: req.url,
        eventTypes: req.eventTypes,
        tenantId: req.tenantId,
        description: req.description,
        secret: req.secret,
        caPem: req.caPem,
        allowPrivateNetwork: req.allowPrivateNetwork,
        nodeSelector: req.nodeSelector,
      });
      callInfo(ctx).audit.target = `webhook/${created.webhook.id}`;
      return { meta: responseMeta(ctx), webhook: created.webhook, secret: created.secret };
    },

    async listWebhooks(_req, ctx) {
      return { meta: responseMeta(ctx), webhooks: await listWebhooks(deps) };
    },

    async getWebhook(req, ctx) {
      return { meta: responseMeta(ctx), webhook: await getWebhook(deps, req.id) };
    },

    async updateWebhook(req, ctx) {
      callInfo(ctx).audit.target = `webhook/${req.id}`;
      const webhook = await updateWebhook(deps, req.id, {
        url: req.url,
        eventTypes: req.eventTypes,
        tenantId: req.tenantId,
        description: req.description,
        paused: req.paused,
        secret: req.secret,
        caPem: req.caPem,
        allowPrivateNetwork: req.allowPrivateNetwork,
        // Present replaces (empty: the controller delivers again); absent leaves it.
        nodeSelector: req.nodeSelector?.labels,
      });
      return { meta: responseMeta(ctx), webhook };
    },

    async deleteWebhook(req, ctx) {
      callInfo(ctx).audit.target = `webhook/${req.id}`;
      await deleteWebhook(deps, req.id);
      return { meta: responseMeta(ctx) };
    },

    async listWebhookDeliveries(req, ctx) {
      const page = await listDeliveries(deps, req.webhookId, {
        state: req.state || undefined,
        pageSize: req.pageSize,
        pageToken: req.pageToken,
      });
      return { meta: responseMeta(ctx), deliveries: page.items, nextPageToken: page.nextPageToken };
    },

    async redeliverWebhookDelivery(req, ctx) {
      callInfo(ctx).audit.target = `webhook_delivery/${req.id}`;
      return { meta: responseMeta(ctx), delivery: await redeliver(deps, req.webhookId, req.id) };
    },
  };
}
