// Identity across controllers sharing one PostgreSQL database (two controller processes, their
// own data directories and server certificates, one client CA): a key or a certificate revoked
// through one controller is refused by the other on its next call, and both write one audit chain.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { newKeyRequest } from "../agent/identity.js";
import { ensureClientCa } from "../controller/tls/client-ca.js";
import { rpcError } from "./helpers/errors.js";
import { freshDatabase, pgUrl } from "./helpers/postgres.js";
import { startControllerProcess, type ControllerProcess } from "./helpers/processes.js";

const url = pgUrl();

describe.skipIf(!url)("identity across controllers on one database", () => {
  let root: string;
  let a: ControllerProcess;
  let b: ControllerProcess;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-shared-access-"));
    const db = await freshDatabase(`access_${process.pid}`);
    // The client CA the controllers share, as an operator would hand it to each.
    await ensureClientCa({ dataDir: join(root, "shared") });
    await mkdir(join(root, "a"));
    await mkdir(join(root, "b"));
    const env = {
      SKIPPER_CLIENT_CA_CERT: join(root, "shared", "tls", "client-ca.crt"),
      SKIPPER_CLIENT_CA_KEY: join(root, "shared", "tls", "client-ca.key"),
    };
    a = await startControllerProcess({ dataDir: join(root, "a", "data"), extraArgs: ["--store", db], env });
    b = await startControllerProcess({ dataDir: join(root, "b", "data"), extraArgs: ["--store", db], env });
  }, 60_000);

  afterAll(async () => {
    await a?.stop();
    await b?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  const client = <S extends DescService>(
    on: ControllerProcess,
    service: S,
    cred: { bearer?: string; cert?: { certPem: string; keyPem: string } } = {},
  ) =>
    createClient(
      service,
      createConnectTransport({
        baseUrl: `${on.url}/v1`,
        httpVersion: "2",
        nodeOptions: { ca: on.ca, ...(cred.cert ? { cert: cred.cert.certPem, key: cred.cert.keyPem } : {}) },
        interceptors: cred.bearer ? [(next) => (req) => (req.header.set("authorization", `Bearer ${cred.bearer}`), next(req))] : [],
      }),
    );

  it("an API key made on one controller works on the other, and revoked on that one is refused by the first at once", async () => {
    const { apiKey, secret } = await a.admin(AccessService).createApiKey({ name: "shared-ci", role: Role.VIEWER });
    expect((await client(b, AccessService, { bearer: secret }).whoAmI({})).actor?.name).toBe("shared-ci");
    await b.admin(AccessService).revokeApiKey({ id: apiKey!.id });
    const e = await rpcError(client(a, AccessService, { bearer: secret }).whoAmI({}));
    expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "API key shared-ci was revoked"]);
  });

  it("a node enrolled through one controller calls the other by mutual TLS until its certificates are revoked", async () => {
    const { token } = await a.admin(EnrollmentService).createEnrollmentToken({});
    const request = await newKeyRequest("shared-host");
    const enrolled = await client(a, EnrollmentService).enrollNode({
      enrollmentToken: token,
      nodeId: "shared-host",
      csrPem: request.csrPem,
    });
    const cert = { certPem: enrolled.certificatePem, keyPem: request.keyPem };
    await client(b, NodeService, { cert }).heartbeat({ nodeId: "shared-host" });
    await a.admin(EnrollmentService).revokeNodeCertificates({ nodeId: "shared-host" });
    expect((await rpcError(client(b, NodeService, { cert }).heartbeat({ nodeId: "shared-host" }))).code).toBe("UNAUTHORIZED");
  });

  it("both controllers append to one gapless, intact audit chain", async () => {
    const fromA = (await a.admin(AuditService).listAuditEntries({ pageSize: 1000 })).entries;
    const verified = await b.admin(AuditService).verifyAuditTrail({});
    expect(verified.intact).toBe(true);
    expect(Number(verified.entriesChecked)).toBe(fromA.length);
    expect(fromA.map((e) => Number(e.sequence))).toEqual(fromA.map((_, i) => i + 1));
    // Calls made on each controller are in it: the revocations above went through different ones.
    expect(fromA.map((e) => e.rpc)).toEqual(
      expect.arrayContaining(["skipper.v1.AccessService/RevokeApiKey", "skipper.v1.EnrollmentService/RevokeNodeCertificates"]),
    );
  });
});
