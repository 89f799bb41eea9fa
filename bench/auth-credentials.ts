// The credentials the authentication benchmark (auth-cost.ts) calls with, made on a running
// controller the way an operator and a fleet make them: the admin token the controller was started
// with, an API key (AccessService.CreateApiKey), node tokens (NodeService.RegisterNode) and client
// certificates (an enrollment token, then EnrollNode with no credential and a CSR for a key made
// here, as skippy makes it: agent/identity.ts).
import { createClient } from "@connectrpc/connect";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { newKeyRequest } from "../agent/identity.js";
import { clientFor, type Controller, transportTo } from "./controller-process.js";

/** How a call authenticates: with nothing, a bearer credential, or the connection's client certificate. */
export type CredentialKind = "none" | "admin token" | "API key" | "node token" | "mTLS";

/** The kinds in the order they are listed. */
export const CREDENTIAL_KINDS: CredentialKind[] = ["none", "admin token", "API key", "node token", "mTLS"];

/** What one client sends: headers on every call and, for mTLS, a certificate in the handshake. */
export interface Credential {
  kind: CredentialKind;
  headers: Record<string, string>;
  clientCert?: { cert: string; key: string };
  /** The node the credential belongs to (node token, mTLS). */
  nodeId?: string;
}

/** `count` credentials of each kind: one per client; a node of its own per client for the node kinds. */
export async function makeCredentials(ctl: Controller, adminToken: string, count: number): Promise<Record<CredentialKind, Credential[]>> {
  const admin = { authorization: `Bearer ${adminToken}` };
  const perClient = <T>(make: (w: number) => Promise<T>) => Promise.all(Array.from({ length: count }, (_, w) => make(w)));
  // One key for every client: the lookup is by the key's id, so many keys would cost the same.
  const key = await clientFor(AccessService, ctl.url, ctl.ca, admin).createApiKey({ name: "bench-auth", role: Role.VIEWER });
  const nodes = clientFor(NodeService, ctl.url, ctl.ca, admin);
  const tokens = await perClient(async (w) => {
    const nodeId = `bench-token-${w}`;
    return { nodeId, token: (await nodes.registerNode({ nodeId, displayName: `auth bench ${w}` })).token };
  });
  const enrollment = await clientFor(EnrollmentService, ctl.url, ctl.ca, admin).createEnrollmentToken({
    uses: count,
    description: "auth bench",
  });
  // EnrollNode takes no credential: the enrollment token in the request is the proof.
  const enroll = createClient(EnrollmentService, transportTo(ctl.url, ctl.ca, {}));
  const certs = await perClient(async (w) => {
    const nodeId = `bench-mtls-${w}`;
    const request = await newKeyRequest(nodeId);
    const done = await enroll.enrollNode({ enrollmentToken: enrollment.token, nodeId, csrPem: request.csrPem });
    return { nodeId, cert: done.certificatePem, key: request.keyPem };
  });
  const each = (make: (w: number) => Credential) => Array.from({ length: count }, (_, w) => make(w));
  return {
    none: each(() => ({ kind: "none", headers: {} })),
    "admin token": each(() => ({ kind: "admin token", headers: admin })),
    "API key": each(() => ({ kind: "API key", headers: { authorization: `Bearer ${key.secret}` } })),
    "node token": each((w) => ({
      kind: "node token",
      headers: { authorization: `Bearer ${tokens[w]!.token}` },
      nodeId: tokens[w]!.nodeId,
    })),
    mTLS: each((w) => ({ kind: "mTLS", headers: {}, clientCert: { cert: certs[w]!.cert, key: certs[w]!.key }, nodeId: certs[w]!.nodeId })),
  };
}
