// EnrollmentService: enrollment tokens, and nodes joining, renewing and losing client
// certificates (the rules live in nodes/node-enrollment.ts). Token texts are returned once.
import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { EnrollmentService } from "../../gen/skipper/v1/enrollment_service_pb.js";
import { callInfo, responseMeta, traceOf } from "../base/context.js";
import { forbidden } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import {
  createEnrollmentToken,
  enrollNode,
  listEnrollmentTokens,
  renewNodeCertificate,
  revokeEnrollmentToken,
  revokeNodeCertificates,
} from "../nodes/node-enrollment.js";
import type { ServiceDeps } from "./deps.js";

/** Enrollment implementation. */
export function enrollmentService(deps: ServiceDeps): ServiceImpl<typeof EnrollmentService> {
  return {
    async createEnrollmentToken(req, ctx) {
      const call = callInfo(ctx);
      const { token, text } = await createEnrollmentToken(deps, {
        uses: req.uses,
        ttl: req.ttl,
        nodeId: req.nodeId,
        labels: req.labels,
        certificateTtl: req.certificateTtl,
        description: req.description,
        createdBy: call.actor,
      });
      call.audit.target = `enrollment_token/${token.id}`;
      return { meta: responseMeta(ctx), enrollmentToken: token, token: text };
    },

    async listEnrollmentTokens(req, ctx) {
      return { meta: responseMeta(ctx), enrollmentTokens: await listEnrollmentTokens(deps, req.includeInactive) };
    },

    async revokeEnrollmentToken(req, ctx) {
      callInfo(ctx).audit.target = `enrollment_token/${req.id}`;
      return { meta: responseMeta(ctx), enrollmentToken: await revokeEnrollmentToken(deps, req.id) };
    },

    async enrollNode(req, ctx) {
      const call = callInfo(ctx);
      const done = await enrollNode(deps, req, traceOf(call));
      // The enrollment is recorded as the token's doing (the caller had no other credential).
      call.audit.target = `node/${done.nodeId}`;
      call.audit.actor = done.actor;
      call.logger.info(
        { action: "node_enrolled", result: "ok", node_id: done.nodeId, metadata: { token_id: done.actor.id } },
        "node enrolled",
      );
      return {
        meta: responseMeta(ctx),
        nodeId: done.nodeId,
        certificatePem: done.certificatePem,
        notAfter: timestampFromDate(done.notAfter),
      };
    },

    async renewNodeCertificate(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = checkId(req.nodeId, "node_id");
      if (call.principal.kind !== "node" || call.principal.nodeId !== nodeId) {
        throw forbidden(`only node ${nodeId} renews its own certificate`, { node_id: nodeId });
      }
      // An SSH node has no certificate of its own: its relay holds the credential.
      if (call.principal.relayNodeId !== undefined) {
        throw forbidden(`node ${nodeId} is relayed over SSH: only its relay's own certificate is renewed`, { node_id: nodeId });
      }
      const { certificateSerial: serial, tokenHash } = call.principal;
      const renewed = await renewNodeCertificate(deps, nodeId, req.csrPem, { serial, tokenHash }, traceOf(call));
      call.logger.info(
        { action: "node_certificate_renewed", result: "ok", node_id: nodeId, metadata: { not_after: renewed.notAfter.toISOString() } },
        "node certificate renewed",
      );
      return { meta: responseMeta(ctx), certificatePem: renewed.certificatePem, notAfter: timestampFromDate(renewed.notAfter) };
    },

    async revokeNodeCertificates(req, ctx) {
      const call = callInfo(ctx);
      const revoked = await revokeNodeCertificates(deps, req.nodeId, req.reason, traceOf(call));
      deps.credentialEnds.changed(`node:${req.nodeId}`);
      call.logger.warn(
        { action: "node_certificates_revoked", result: "ok", node_id: req.nodeId, metadata: { revoked } },
        "node certificates revoked",
      );
      return { meta: responseMeta(ctx), revoked };
    },
  };
}
