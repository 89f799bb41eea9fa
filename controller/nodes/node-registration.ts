// Registering a node and rotating its token. A node's token is shown once, in the response, and
// stored only as its hash; registering a node that already has a credential is a CONFLICT (its
// token is rotated instead), so a retry cannot silently take over a host's identity.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { RegisterNodeRequest } from "../../gen/skipper/v1/node_service_pb.js";
import { MetadataSchema, ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { SCHEMA_VERSION } from "../../common/schema-version.js";
import type { Trace } from "../base/context.js";
import { conflict, notFound } from "../base/errors.js";
import { hashToken, mintNodeToken } from "../auth/tokens.js";
import { buildEvent, recordEvents } from "../events/event-recorder.js";
import { checkTrustedKeys } from "../resources/resource-rules.js";
import { checkSelector } from "../domain/label-selector.js";
import type { Store } from "../store/store.js";
import type { KeyedLock } from "../base/keyed-lock.js";

export interface RegistrationDeps {
  store: Store;
  now: () => Date;
  /** A node's credential is rewritten under its lock (as enrollment and revocation do). */
  locks?: Pick<KeyedLock, "run">;
}

/** Registers node `nodeId` (its resource, when new, and a fresh credential); returns the node and its token. */
export async function registerNode(
  deps: RegistrationDeps,
  nodeId: string,
  req: RegisterNodeRequest,
  trace: Trace,
): Promise<{ node: Resource; token: string }> {
  const { store } = deps;
  checkSelector(req.labels, "labels");
  checkTrustedKeys(req.trustedLabelKeys, "trusted_label_keys");
  if ((await store.getNodeCredential(nodeId)) && (await store.getResource("node", nodeId))) {
    throw conflict(`node ${nodeId} is already registered; rotate its token with POST /v1/nodes/${nodeId}/token`, { node_id: nodeId });
  }
  // Decided before the node is (re)created: a new host under a deleted node's name starts clean.
  const wasLive = await store.resourceExists("node", nodeId);
  const node = await ensureNodeResource(deps, nodeId, req, trace);
  const token = await newCredential(deps, nodeId, wasLive);
  await recordEvents(store, [{ type: "node_registered", ...trace, resourceType: "node", resourceId: nodeId, nodeId }]);
  return { node, token };
}

/** The node's resource, created (with a resource_created event) when it does not exist yet. */
export async function ensureNodeResource(
  deps: RegistrationDeps,
  nodeId: string,
  req: { displayName: string; labels: Record<string, string>; trustedLabelKeys: string[] },
  trace: Trace,
): Promise<Resource> {
  const { store } = deps;
  let node = await store.getResource("node", nodeId);
  if (!node) {
    const now = timestampFromDate(deps.now());
    node = await store.createResource(
      create(ResourceSchema, {
        id: nodeId,
        resourceType: "node",
        schemaVersion: SCHEMA_VERSION,
        desiredState: {
          kind: {
            case: "node",
            value: { displayName: req.displayName || nodeId, labels: req.labels, trustedLabelKeys: req.trustedLabelKeys },
          },
        },
        metadata: create(MetadataSchema, {
          labels: req.labels,
          requestId: trace.requestId,
          correlationId: trace.correlationId,
          traceparent: trace.traceparent,
        }),
        createdAt: now,
        updatedAt: now,
      }),
      // With its event, in one write (store.ts EventsOf).
      (n) => [
        buildEvent({
          type: "resource_created",
          ...trace,
          resourceType: "node",
          resourceId: nodeId,
          nodeId,
          revision: n.metadata?.resourceVersion,
        }),
      ],
    );
  }
  return node;
}

/** Replaces a registered node's token; the old one stops working at once. */
export async function rotateNodeToken(deps: RegistrationDeps, nodeId: string, trace: Trace): Promise<string> {
  if (!(await deps.store.getResource("node", nodeId))) throw notFound("node", nodeId);
  const token = await newCredential(deps, nodeId);
  await recordEvents(deps.store, [{ type: "node_token_rotated", ...trace, resourceType: "node", resourceId: nodeId, nodeId }]);
  return token;
}

async function newCredential(deps: RegistrationDeps, nodeId: string, keepCertificates = true): Promise<string> {
  const token = mintNodeToken(nodeId);
  const write = async () => {
    // An enrolled node's certificates are a credential of their own: a new token leaves them be.
    // Those of a node that was deleted (a new host under an old name) are not carried over.
    // Those minted with the old token die with it.
    const certificates = keepCertificates
      ? (await deps.store.getLiveNodeCredential(nodeId))?.certificates?.filter((c) => c.underTokenHash === undefined)
      : undefined;
    await deps.store.putNodeCredential({
      nodeId,
      tokenHash: hashToken(token),
      createdAt: deps.now(),
      ...(certificates ? { certificates } : {}),
    });
  };
  await (deps.locks ? deps.locks.run(`node-certificates:${nodeId}`, write) : write());
  return token;
}
