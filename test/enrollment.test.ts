// Node enrollment over the real server (HTTP/2 + TLS, client certificates checked by TLS and by
// the controller): tokens, CSRs, mutual TLS, renewal and revocation, with keys made the way skippy
// makes them (agent/identity.ts).
import { filesHolding } from "./helpers/files.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { X509Certificate } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { NodeService, SessionNoticeKind } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { ActorKind, Role } from "../gen/skipper/v1/access_pb.js";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { newKeyRequest } from "../agent/identity.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { openSession } from "./helpers/session-client.js";

let tc: TestController;

beforeAll(async () => {
  tc = await startController({ tls: true, logToFile: true });
});
afterAll(async () => {
  await tc?.stop();
});

/** A client calling with a client certificate (and no other credential). */
function withCert<S extends DescService>(service: S, cert: { certPem: string; keyPem: string }, on = tc) {
  return createClient(
    service,
    createConnectTransport({ baseUrl: `${on.url}/v1`, httpVersion: "2", nodeOptions: { ca: on.ca, cert: cert.certPem, key: cert.keyPem } }),
  );
}

function anonymous<S extends DescService>(service: S, on = tc) {
  return createClient(service, createConnectTransport({ baseUrl: `${on.url}/v1`, httpVersion: "2", nodeOptions: { ca: on.ca } }));
}

async function token(req: Parameters<ReturnType<typeof adminEnrollment>["createEnrollmentToken"]>[0] = {}) {
  return (await adminEnrollment().createEnrollmentToken(req)).token;
}

function adminEnrollment() {
  return tc.client(EnrollmentService, { admin: true });
}

/** Enrolls `nodeId` with `enrollmentToken`; returns the key and certificate. */
async function enroll(nodeId: string, enrollmentToken: string) {
  const request = await newKeyRequest(nodeId);
  const res = await anonymous(EnrollmentService).enrollNode({ enrollmentToken, nodeId, csrPem: request.csrPem });
  return { certPem: res.certificatePem, keyPem: request.keyPem, notAfter: res.notAfter };
}

describe("enrollment", () => {
  it("a host enrolls with a token, then calls as its node by mutual TLS; the certificate names the node and lives as asked", async () => {
    const text = await token({ labels: { rack: "4" }, certificateTtl: { seconds: 3600n } });
    expect(text).toMatch(/^ske_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/);
    const cert = await enroll("edge-1", text);
    const x = new X509Certificate(cert.certPem);
    expect(x.subjectAltName).toBe("URI:spiffe://skipper/node/edge-1");
    expect(x.checkIssued(new X509Certificate(await readFile(join(tc.dataDir, "tls", "client-ca.crt"), "utf8")))).toBe(true);
    const life = new Date(x.validTo).getTime() - Date.now();
    expect(life).toBeGreaterThan(3590_000);
    expect(life).toBeLessThan(3610_000);
    const beat = await withCert(NodeService, cert).heartbeat({ nodeId: "edge-1", agentVersion: "test" });
    expect(beat.meta?.requestId).not.toBe("");
    const who = await withCert(AccessService, cert).whoAmI({});
    expect(who.actor).toMatchObject({ kind: ActorKind.NODE, id: "edge-1" });
    const node = await tc.client(ResourceService, { admin: true }).getResource({ resourceType: "node", id: "edge-1" });
    expect(node.resource?.metadata?.labels).toEqual({ rack: "4" });
    // It is node edge-1 and nobody else.
    expect((await rpcError(withCert(NodeService, cert).heartbeat({ nodeId: "edge-2" }))).code).toBe("FORBIDDEN");
    expect((await rpcError(withCert(ResourceService, cert).listResources({}))).code).toBe("FORBIDDEN");
  });

  it("a used, expired, revoked or foreign token is refused and enrolls nothing", async () => {
    const once = await token();
    await enroll("edge-used", once);
    const used = await rpcError(enroll("edge-other", once));
    expect([used.code, used.message]).toEqual(["UNAUTHORIZED", expect.stringContaining("used up")]);
    const bound = await token({ nodeId: "edge-bound" });
    expect((await rpcError(enroll("edge-intruder", bound))).message).toContain("is for node edge-bound");
    const revoked = await token();
    const id = revoked.split("_")[1]!;
    await adminEnrollment().revokeEnrollmentToken({ id });
    expect((await rpcError(enroll("edge-rev", revoked))).message).toContain("revoked");
    const wrong = `${once.slice(0, -4)}AAAA`;
    expect((await rpcError(enroll("edge-wrong", wrong))).message).toBe("invalid enrollment token");
    const expiring = await token({ ttl: { nanos: 1_000_000 } });
    await waitUntil(async () =>
      (await adminEnrollment().listEnrollmentTokens({ includeInactive: true })).enrollmentTokens.some((t) => t.status === "expired"),
    );
    expect((await rpcError(enroll("edge-late", expiring))).message).toContain("expired");
    const nodes = (await tc.client(ResourceService, { admin: true }).listResources({ resourceType: "node" })).resources.map((r) => r.id);
    for (const n of ["edge-other", "edge-intruder", "edge-rev", "edge-wrong", "edge-late"]) expect(nodes).not.toContain(n);
  });

  it("a bad CSR is INVALID_REQUEST and uses nothing; a retry with the same token and node after a lost answer does not use it twice", async () => {
    const text = await token();
    const bad = await rpcError(anonymous(EnrollmentService).enrollNode({ enrollmentToken: text, nodeId: "edge-csr", csrPem: "not a csr" }));
    expect([bad.code, bad.details.field]).toEqual(["INVALID_REQUEST", "csr_pem"]);
    // The host's retry sends the key it sent first (the agent keeps it across attempts and restarts).
    const request = await newKeyRequest("edge-csr");
    const send = (csrPem: string) => anonymous(EnrollmentService).enrollNode({ enrollmentToken: text, nodeId: "edge-csr", csrPem });
    const first = await send(request.csrPem);
    const again = await send(request.csrPem);
    expect(again.certificatePem).not.toBe(first.certificatePem);
    // Anyone else holding the used token gets nothing, even within the retry window.
    const replay = await rpcError(send((await newKeyRequest("edge-csr")).csrPem));
    expect([replay.code, replay.message]).toEqual([
      "UNAUTHORIZED",
      "this enrollment token was already used for node edge-csr with another key",
    ]);
    const listed = (await adminEnrollment().listEnrollmentTokens({ includeInactive: true })).enrollmentTokens.find((t) =>
      text.includes(t.id),
    );
    expect([listed?.remainingUses, listed?.enrolledNodes]).toEqual([0, ["edge-csr"]]);
  });

  it("renewal gives a new certificate and the old one keeps working until it expires; revocation refuses both at once", async () => {
    const first = await enroll("edge-renew", await token({ certificateTtl: { seconds: 600n } }));
    const request = await newKeyRequest("edge-renew");
    const renewed = await withCert(EnrollmentService, first).renewNodeCertificate({ nodeId: "edge-renew", csrPem: request.csrPem });
    const second = { certPem: renewed.certificatePem, keyPem: request.keyPem };
    const life = (p: string) => new Date(new X509Certificate(p).validTo).getTime() - Date.now();
    expect(life(second.certPem)).toBeGreaterThan(590_000);
    await withCert(NodeService, first).heartbeat({ nodeId: "edge-renew" });
    await withCert(NodeService, second).heartbeat({ nodeId: "edge-renew" });
    // Another node cannot renew for this one.
    const other = await enroll("edge-nosy", await token());
    expect(
      (await rpcError(withCert(EnrollmentService, other).renewNodeCertificate({ nodeId: "edge-renew", csrPem: request.csrPem }))).code,
    ).toBe("FORBIDDEN");
    const revoked = await adminEnrollment().revokeNodeCertificates({ nodeId: "edge-renew", reason: "laptop stolen" });
    expect(revoked.revoked).toBe(2);
    for (const c of [first, second]) {
      const e = await rpcError(withCert(NodeService, c).heartbeat({ nodeId: "edge-renew" }));
      expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "the client certificate has been revoked"]);
    }
    const events = await tc.client(EventService, { admin: true }).listEvents({ resourceId: "edge-renew" });
    expect(events.events.map((e) => e.type)).toEqual(
      expect.arrayContaining(["node_enrolled", "node_certificate_renewed", "node_certificates_revoked"]),
    );
    const byType = (type: string) => events.events.find((e) => e.type === type)?.actor;
    expect(byType("node_enrolled")).toMatchObject({ kind: ActorKind.ENROLLMENT });
    expect(byType("node_certificate_renewed")).toMatchObject({ kind: ActorKind.NODE, id: "edge-renew" });
    // The audit trail has the enrollment (under the token's id), the renewal, the other node's
    // refused try and the revocation; not the heartbeats.
    const audit = (await tc.client(AuditService, { admin: true }).listAuditEntries({ pageSize: 1000 })).entries.filter(
      (e) => e.target === "node/edge-renew",
    );
    expect(audit.map((e) => [e.rpc.split("/")[1], e.actor?.kind, e.outcome])).toEqual([
      ["EnrollNode", ActorKind.ENROLLMENT, "OK"],
      ["RenewNodeCertificate", ActorKind.NODE, "OK"],
      ["RenewNodeCertificate", ActorKind.NODE, "FORBIDDEN"],
      ["RevokeNodeCertificates", ActorKind.ADMIN_TOKEN, "OK"],
    ]);
  });

  it("after a revocation the enrollment token cannot enroll the node again, and a deleted node's certificate stays dead under a new registration", async () => {
    const text = await token({ nodeId: "edge-stolen", uses: 2 });
    const first = await enroll("edge-stolen", text);
    await adminEnrollment().revokeNodeCertificates({ nodeId: "edge-stolen", reason: "laptop stolen" });
    expect((await rpcError(enroll("edge-stolen", text))).message).toContain("revoked");
    // A new host registered under a deleted node's name does not inherit its certificates.
    const other = await enroll("edge-gone", await token());
    await tc.client(ResourceService, { admin: true }).deleteResource({ resourceType: "node", id: "edge-gone" });
    await tc
      .client(NodeService, { admin: true })
      .registerNode({ nodeId: "edge-gone" })
      .catch(() => undefined);
    expect((await rpcError(withCert(NodeService, other).heartbeat({ nodeId: "edge-gone" }))).code).toBe("UNAUTHORIZED");
    expect((await rpcError(withCert(NodeService, first).heartbeat({ nodeId: "edge-stolen" }))).code).toBe("UNAUTHORIZED");
  });

  it("a watch stream opened before a revocation carries nothing after it", async () => {
    const cert = await enroll("edge-watch", await token());
    const stream = withCert(NodeService, cert).watchWorkOrders({ nodeId: "edge-watch" });
    const it = stream[Symbol.asyncIterator]();
    await it.next(); // the first message: the oldest pending order (none)
    await adminEnrollment().revokeNodeCertificates({ nodeId: "edge-watch" });
    // An ad-hoc order rings the stream: the controller checks the credential first and ends it.
    await tc.client(WorkOrderService, { admin: true }).createWorkOrder({
      type: WorkOrderType.INSPECT,
      target: { nodeId: "edge-watch" },
      action: { kind: { case: "inspect", value: {} } },
    });
    const e = await rpcError(it.next());
    expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "this node's credential has been revoked"]);
    // And the refusal is in the audit trail, under the node.
    const audited = async () =>
      (await tc.client(AuditService, { admin: true }).listAuditEntries({ pageSize: 1000 })).entries.some(
        (a) => a.rpc === "skipper.v1.NodeService/WatchWorkOrders" && a.outcome === "UNAUTHORIZED" && a.actor?.id === "edge-watch",
      );
    await waitUntil(audited);
  });

  it("a certificate minted with a node token dies when the token is rotated; streams the old token opened end at once", async () => {
    const nodes = tc.client(NodeService, { admin: true });
    const { token: nodeToken } = await nodes.registerNode({ nodeId: "edge-token" });
    const bearer = <S extends DescService>(service: S) => tc.client(service, { headers: { authorization: `Bearer ${nodeToken}` } });
    const request = await newKeyRequest("edge-token");
    const minted = await bearer(EnrollmentService).renewNodeCertificate({ nodeId: "edge-token", csrPem: request.csrPem });
    const cert = { certPem: minted.certificatePem, keyPem: request.keyPem };
    await withCert(NodeService, cert).heartbeat({ nodeId: "edge-token" });
    // Renewed over that certificate: the new one descends from the token too.
    const next = await newKeyRequest("edge-token");
    const renewed = await withCert(EnrollmentService, cert).renewNodeCertificate({ nodeId: "edge-token", csrPem: next.csrPem });
    const child = { certPem: renewed.certificatePem, keyPem: next.keyPem };
    const stream = bearer(NodeService).watchWorkOrders({ nodeId: "edge-token" })[Symbol.asyncIterator]();
    await stream.next();
    const certStream = withCert(NodeService, child).watchWorkOrders({ nodeId: "edge-token" })[Symbol.asyncIterator]();
    await certStream.next();
    await nodes.rotateNodeToken({ nodeId: "edge-token" });
    // No order rings them: the rotation itself ends both.
    for (const s of [stream, certStream]) expect((await rpcError(s.next())).code).toBe("UNAUTHORIZED");
    for (const c of [cert, child]) {
      expect((await rpcError(withCert(NodeService, c).heartbeat({ nodeId: "edge-token" }))).code).toBe("UNAUTHORIZED");
      expect(
        (await rpcError(withCert(EnrollmentService, c).renewNodeCertificate({ nodeId: "edge-token", csrPem: next.csrPem }))).code,
      ).toBe("UNAUTHORIZED");
    }
    // An enrolled node's certificate is a credential of its own: a token rotation leaves it be.
    const enrolled = await enroll("edge-own", await token());
    await nodes.rotateNodeToken({ nodeId: "edge-own" });
    await withCert(NodeService, enrolled).heartbeat({ nodeId: "edge-own" });
  });

  it("a revoked API key's open event watch ends at once", async () => {
    const { secret } = await tc.client(AccessService, { admin: true }).createApiKey({ name: "watcher", role: Role.VIEWER });
    const keyId = secret.split("_")[1]!;
    const watch = tc
      .client(EventService, { headers: { authorization: `Bearer ${secret}` } })
      .watchEvents({})
      [Symbol.asyncIterator]();
    await watch.next();
    await tc.client(AccessService, { admin: true }).revokeApiKey({ id: keyId, reason: "left the team" });
    // What was recorded just before may still come (a watch sends the last seconds first); then it ends.
    const ended = async () => {
      for (;;) if ((await watch.next()).done) throw new Error("the watch ended without an error");
    };
    const e = await rpcError(ended());
    expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "the credential of this watch has been revoked"]);
  });

  it("a session opened with a certificate is told CERTIFICATE_RENEWAL_DUE once three quarters of its life passed, unless the node renewed", async () => {
    // Certificates of 10 s: due at 7.5 s. One node renews at once (enrolled first, so its due
    // time comes first); the other does not.
    const fresh = await enroll("edge-renewed", await token({ certificateTtl: { seconds: 10n } }));
    const stale = await enroll("edge-due", await token({ certificateTtl: { seconds: 10n } }));
    const open = (nodeId: string, cert: { certPem: string; keyPem: string }) => {
      const s = openSession(withCert(NodeService, cert), 20_000);
      s.send({ case: "hello", value: { nodeId, agentVersion: "test", journalWorkOrderIds: [] } });
      return s;
    };
    const renewed = open("edge-renewed", fresh);
    const due = open("edge-due", stale);
    await renewed.next("the welcome", (m) => (m.kind.case === "welcome" ? true : undefined));
    const again = await newKeyRequest("edge-renewed");
    await withCert(EnrollmentService, fresh).renewNodeCertificate({ nodeId: "edge-renewed", csrPem: again.csrPem });
    const notice = await due.next("the renewal notice", (m) => (m.kind.case === "notice" ? m.kind.value : undefined));
    expect(notice.kind).toBe(SessionNoticeKind.CERTIFICATE_RENEWAL_DUE);
    expect(notice.message).toContain("renew it now");
    expect(Date.now()).toBeLessThan(Number(stale.notAfter!.seconds) * 1000);
    // The renewed node's session passed its due time first and was told nothing: an answer asked
    // for now comes with no notice before it.
    const from = renewed.received.length;
    renewed.send({ case: "ack", value: { workOrderId: "no-such-order", fencingToken: 1n } });
    await renewed.next("the refused ack", (m) => (m.kind.case === "answer" ? true : undefined), from);
    expect(renewed.received.some((m) => m.kind.case === "notice")).toBe(false);
    due.close();
    renewed.close();
  });

  it("a node calls the REST routes with its certificate too", async () => {
    const cert = await enroll("edge-rest", await token());
    const res = await fetchWithCert(`${tc.url}/v1/nodes/edge-rest/heartbeat`, cert, { agent_version: "rest" });
    expect([res.status, (res.body as { data?: unknown }).data !== null]).toEqual([200, true]);
  });

  it("an expired certificate is refused with what to do; one from another CA is refused", async () => {
    // A controller whose clock runs two hours behind signs certificates that have already expired.
    const past = await startController({ tls: true, now: () => new Date(Date.now() - 2 * 3600_000) });
    try {
      const text = (await past.client(EnrollmentService, { admin: true }).createEnrollmentToken({ certificateTtl: { seconds: 60n } }))
        .token;
      const request = await newKeyRequest("edge-old");
      const res = await anonymous(EnrollmentService, past).enrollNode({
        enrollmentToken: text,
        nodeId: "edge-old",
        csrPem: request.csrPem,
      });
      const e = await rpcError(
        withCert(NodeService, { certPem: res.certificatePem, keyPem: request.keyPem }, past).heartbeat({ nodeId: "edge-old" }),
      );
      expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "the client certificate has expired: the node must enroll again"]);
      // That controller's certificates mean nothing to this one.
      const foreign = await enroll("edge-foreign", await token());
      const f = await rpcError(withCert(NodeService, foreign, past).heartbeat({ nodeId: "edge-foreign" }));
      expect(f.code).toBe("UNAUTHORIZED");
      // The open calls still answer a holder of a certificate TLS did not accept.
      const who = await withCert(AccessService, { certPem: res.certificatePem, keyPem: request.keyPem }, past).whoAmI({});
      expect(who.actor?.kind).toBe(ActorKind.ANONYMOUS);
    } finally {
      await past.stop();
    }
  });

  it("no enrollment token text or node private key is kept under the data directory", async () => {
    const text = await token();
    const cert = await enroll("edge-secret", text);
    const secret = text.slice("ske_".length + 13);
    expect(secret).toHaveLength(43);
    const keyBody = cert.keyPem.replace(/-----[^-]+-----|\s/g, "").slice(20, 80);
    const hits: string[] = [];
    for (const h of await filesHolding(tc.dataDir, [secret, keyBody])) hits.push(h.path);
    expect(hits).toEqual([]);
  });
});

/** A JSON POST over HTTP/2 + TLS with a client certificate; the REST envelope back. */
async function fetchWithCert(
  url: string,
  cert: { certPem: string; keyPem: string },
  body: unknown,
): Promise<{ status: number; body: unknown }> {
  const http2 = await import("node:http2");
  const u = new URL(url);
  const session = http2.connect(u.origin, { ca: tc.ca, cert: cert.certPem, key: cert.keyPem });
  try {
    return await new Promise((resolve, reject) => {
      const req = session.request({ ":method": "POST", ":path": u.pathname, "content-type": "application/json" });
      let status = 0;
      let text = "";
      req.on("response", (h) => (status = Number(h[":status"])));
      req.on("data", (d: Buffer) => (text += d.toString()));
      req.on("end", () => resolve({ status, body: JSON.parse(text) }));
      req.on("error", reject);
      req.end(JSON.stringify(body));
    });
  } finally {
    session.close();
  }
}

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}
