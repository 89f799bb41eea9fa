// Credentials that end, and scopes that confine, against the built controller as a process. Each
// case counts wrongful successes (bar 0): a call that worked with a credential that had ended, a
// stream that kept delivering after its credential ended (bounded wait: a stream still open then
// is a wrongful success), a replayed enrollment token accepted with another key, and a write by a
// key scoped to one tenant that placed it on another tenant's node, gave it host privileges or
// changed its policy (resource_version unchanged after each refusal).
import { join } from "node:path";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { Role } from "../../gen/skipper/v1/access_pb.js";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { EnrollmentService } from "../../gen/skipper/v1/enrollment_service_pb.js";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { ComposePolicyLevel } from "../../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { newKeyRequest } from "../../agent/identity.js";
import { exactly, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { withTimeout } from "./stalled-streams.js";

const SECTION = "credentials and scopes";
// How long a stream may keep going after its credential ended.
const STREAM_END_MS = 5000;

export const credentialLifecycleProbe: Probe = {
  name: "credential-lifecycle",
  async run({ workDir, log }) {
    const ctl = await startController({ dataDir: join(workDir, "data") });
    try {
      const figures = [...(await credentials(ctl, log)), ...(await scopes(ctl, log))];
      figures.push(exactly(SECTION, "controller down afterwards", ctl.alive() ? 0 : 1, 0));
      return figures;
    } finally {
      await ctl.stop();
    }
  },
};

/** Resolves true when `p` succeeds, false when it fails; a call still running after 10 s counts as a success (it was not refused). */
async function succeeds(p: Promise<unknown>): Promise<boolean> {
  const r = await withTimeout(
    p.then(
      () => true,
      () => false,
    ),
    10_000,
  );
  return r ?? true;
}

/** Whether a stream still delivers (or stays open) STREAM_END_MS after its credential ended. */
async function streamOutlives(next: () => Promise<unknown>): Promise<boolean> {
  const ended = (async () => {
    for (;;) {
      const r = (await next()) as { done?: boolean };
      if (r.done) return true;
    }
  })().then(
    () => true,
    () => true,
  );
  return (await withTimeout(ended, STREAM_END_MS)) === undefined;
}

function withCert<S extends DescService>(ctl: ControllerProcess, service: S, cert: { certPem: string; keyPem: string }) {
  return createClient(
    service,
    createConnectTransport({
      baseUrl: `${ctl.url}/v1`,
      httpVersion: "2",
      nodeOptions: { ca: ctl.ca, cert: cert.certPem, key: cert.keyPem },
    }),
  );
}

function withBearer<S extends DescService>(ctl: ControllerProcess, service: S, token: string) {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  return createClient(
    service,
    createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca }, interceptors: [auth] }),
  );
}

async function credentials(ctl: ControllerProcess, log: (m: string) => void): Promise<Figure[]> {
  const nodes = ctl.admin(NodeService);
  const wrong: string[] = [];
  let cases = 0;
  const check = (name: string, wrongful: boolean) => {
    cases++;
    if (wrongful) wrong.push(name);
  };
  // A node token, a watch opened with it, and a certificate minted with it (and renewed from that).
  const { token } = await nodes.registerNode({ nodeId: "cred-node" });
  const request = await newKeyRequest("cred-node");
  const minted = await withBearer(ctl, EnrollmentService, token).renewNodeCertificate({ nodeId: "cred-node", csrPem: request.csrPem });
  const cert = { certPem: minted.certificatePem, keyPem: request.keyPem };
  const next = await newKeyRequest("cred-node");
  const renewed = await withCert(ctl, EnrollmentService, cert).renewNodeCertificate({ nodeId: "cred-node", csrPem: next.csrPem });
  const child = { certPem: renewed.certificatePem, keyPem: next.keyPem };
  const watch = withBearer(ctl, NodeService, token).watchWorkOrders({ nodeId: "cred-node" })[Symbol.asyncIterator]();
  await watch.next();
  await nodes.rotateNodeToken({ nodeId: "cred-node" });
  check("old node token, a heartbeat", await succeeds(withBearer(ctl, NodeService, token).heartbeat({ nodeId: "cred-node" })));
  check("old node token, its open order watch", await streamOutlives(() => watch.next()));
  check("certificate minted with the old token", await succeeds(withCert(ctl, NodeService, cert).heartbeat({ nodeId: "cred-node" })));
  check("certificate renewed from it", await succeeds(withCert(ctl, NodeService, child).heartbeat({ nodeId: "cred-node" })));
  // An enrolled node: its certificate is its own (not a wrongful success: it must still work).
  const enrollment = (await ctl.admin(EnrollmentService).createEnrollmentToken({ nodeId: "cred-enrolled" })).token;
  const key = await newKeyRequest("cred-enrolled");
  const anonymous = createClient(
    EnrollmentService,
    createConnectTransport({ baseUrl: `${ctl.url}/v1`, httpVersion: "2", nodeOptions: { ca: ctl.ca } }),
  );
  const enrolled = await anonymous.enrollNode({ enrollmentToken: enrollment, nodeId: "cred-enrolled", csrPem: key.csrPem });
  const sameKey = await succeeds(anonymous.enrollNode({ enrollmentToken: enrollment, nodeId: "cred-enrolled", csrPem: key.csrPem }));
  const otherKey = await newKeyRequest("cred-enrolled");
  check(
    "used enrollment token replayed with another key",
    await succeeds(anonymous.enrollNode({ enrollmentToken: enrollment, nodeId: "cred-enrolled", csrPem: otherKey.csrPem })),
  );
  const own = { certPem: enrolled.certificatePem, keyPem: key.keyPem };
  await nodes.rotateNodeToken({ nodeId: "cred-enrolled" }).catch(() => undefined);
  const ownStillWorks = await succeeds(withCert(ctl, NodeService, own).heartbeat({ nodeId: "cred-enrolled" }));
  // Revoked certificates, and the watch one opened.
  const ownWatch = withCert(ctl, NodeService, own).watchWorkOrders({ nodeId: "cred-enrolled" })[Symbol.asyncIterator]();
  await ownWatch.next();
  await ctl.admin(EnrollmentService).revokeNodeCertificates({ nodeId: "cred-enrolled", reason: "trust probe" });
  check("revoked certificate, a heartbeat", await succeeds(withCert(ctl, NodeService, own).heartbeat({ nodeId: "cred-enrolled" })));
  check("revoked certificate, its open order watch", await streamOutlives(() => ownWatch.next()));
  // An API key revoked, and its open event watch.
  const { secret, apiKey } = await ctl.admin(AccessService).createApiKey({ name: "trust-watcher", role: Role.VIEWER });
  const events = withBearer(ctl, EventService, secret).watchEvents({})[Symbol.asyncIterator]();
  await events.next();
  await ctl.admin(AccessService).revokeApiKey({ id: apiKey!.id, reason: "trust probe" });
  check("revoked API key, a read", await succeeds(withBearer(ctl, ResourceService, secret).listResources({})));
  check("revoked API key, its open event watch", await streamOutlives(() => events.next()));
  log(`credentials: ${cases} cases, wrongful successes: ${wrong.length ? wrong.join("; ") : "none"}`);
  return [
    exactly(
      SECTION,
      `wrongful successes of ended credentials (${cases} cases: rotated token, certificates minted under it, revoked certificates and API key, their open streams within ${STREAM_END_MS / 1000} s, a replayed enrollment token)`,
      wrong.length,
      0,
    ),
    exactly(
      SECTION,
      "a host's own retry of its enrollment (same key) accepted, and its certificate kept through a token rotation",
      (sameKey ? 0 : 1) + (ownStillWorks ? 0 : 1),
      0,
    ),
  ];
}

const HOSTILE = [
  ["privileged", "    privileged: true\n"],
  ["host pid", "    pid: host\n"],
  ["host network", "    network_mode: host\n"],
  ["SYS_ADMIN", "    cap_add: [SYS_ADMIN]\n"],
  ["a device", "    devices: ['/dev/sda:/dev/sda']\n"],
  ["/ mounted", "    volumes: ['/:/host']\n"],
  ["the Docker socket", "    volumes: ['/var/run/docker.sock:/var/run/docker.sock']\n"],
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a compose variable, as a tenant writes it
  ["interpolated privileges", "    privileged: ${PRIV}\n"],
  ["unconfined seccomp", "    security_opt: ['seccomp:unconfined']\n"],
] as const;

async function scopes(ctl: ControllerProcess, log: (m: string) => void): Promise<Figure[]> {
  const admin = ctl.admin(ResourceService);
  for (const [id, pool] of [
    ["scope-a", "a"],
    ["scope-b", "b"],
  ] as const) {
    await admin.createResource({
      resourceType: "node",
      resource: { id, resourceType: "node", metadata: { labels: { pool } }, desiredState: { kind: { case: "node", value: {} } } },
    });
  }
  const plain = "services:\n  web:\n    image: busybox\n";
  const tenant = (id: string, value: object) => ({
    id,
    resourceType: "tenant",
    desiredState: { kind: { case: "tenant" as const, value } },
  });
  await admin.createResource({ resourceType: "tenant", resource: tenant("scope-t1", { compose: { composeFile: plain } }) });
  await admin.createResource({
    resourceType: "tenant",
    resource: tenant("scope-t2", { compose: { composeFile: plain }, deploymentPolicy: { targetNodeId: "scope-b" } }),
  });
  const wrong: string[] = [];
  let attempts = 0;
  for (const role of [Role.OPERATOR, Role.GENERATOR]) {
    const { secret } = await ctl
      .admin(AccessService)
      .createApiKey({ name: `trust-scope-${Role[role].toLowerCase()}`, role, scope: { tenantIds: ["scope-t1"] } });
    const scoped = withBearer(ctl, ResourceService, secret);
    const version = async () => (await admin.getResource({ resourceType: "tenant", id: "scope-t1" })).resource?.metadata?.resourceVersion;
    const attempt = async (name: string, call: Promise<unknown>) => {
      attempts++;
      const before = await version();
      const ok = await succeeds(call);
      if (ok || (await version()) !== before) wrong.push(`${Role[role]}: ${name}`);
    };
    const update = (value: object) =>
      scoped.updateResource({ resourceType: "tenant", id: "scope-t1", desiredState: tenant("scope-t1", value).desiredState });
    await attempt("placed on t2's node", update({ compose: { composeFile: plain }, deploymentPolicy: { targetNodeId: "scope-b" } }));
    await attempt(
      "placed by t2's pool label",
      update({ compose: { composeFile: plain }, deploymentPolicy: { nodeSelector: { pool: "b" } } }),
    );
    for (const [name, body] of HOSTILE) await attempt(name, update({ compose: { composeFile: `${plain}${body}`, env: { PRIV: "true" } } }));
    await attempt(
      "merge key",
      update({ compose: { composeFile: `x-p: &p\n  privileged: true\nservices:\n  web:\n    <<: *p\n    image: busybox\n` } }),
    );
    await attempt(
      "its own policy",
      update({ compose: { composeFile: plain }, policy: { compose: { level: ComposePolicyLevel.PRIVILEGED } } }),
    );
    await attempt(
      "a service on t2's node",
      scoped.createResource({
        resourceType: "service",
        resource: {
          id: `scope-svc-${role}`,
          resourceType: "service",
          desiredState: {
            kind: { case: "service", value: { tenantId: "scope-t1", image: "busybox", placement: { targetNodeId: "scope-b" } } },
          },
        },
      }),
    );
    attempts++;
    if (
      await succeeds(
        scoped.createResource({
          resourceType: "volume",
          resource: {
            id: `scope-vol-${role}`,
            resourceType: "volume",
            desiredState: { kind: { case: "volume", value: { tenantId: "scope-t1", driver: "rexray" } } },
          },
        }),
      )
    ) {
      wrong.push(`${Role[role]}: a volume with a plugin driver`);
    }
  }
  // Inside the pool an admin gives, placement works; outside, still refused.
  await admin.updateResource({
    resourceType: "tenant",
    id: "scope-t1",
    desiredState: tenant("scope-t1", {
      compose: { composeFile: plain },
      policy: { nodeSelector: { pool: "a" }, compose: { level: ComposePolicyLevel.RESTRICTED } },
    }).desiredState,
  });
  const { secret } = await ctl
    .admin(AccessService)
    .createApiKey({ name: "trust-scope-pool", role: Role.OPERATOR, scope: { tenantIds: ["scope-t1"] } });
  const scoped = withBearer(ctl, ResourceService, secret);
  const place = (node: string) =>
    scoped.updateResource({
      resourceType: "tenant",
      id: "scope-t1",
      desiredState: tenant("scope-t1", { compose: { composeFile: plain }, deploymentPolicy: { targetNodeId: node } }).desiredState,
    });
  const inside = await succeeds(place("scope-a"));
  attempts++;
  if (await succeeds(place("scope-b"))) wrong.push("placed outside its pool after the admin gave one");
  log(`scopes: ${attempts} attempts, wrongful successes: ${wrong.length ? wrong.join("; ") : "none"}`);
  return [
    exactly(
      SECTION,
      `wrongful successes of keys scoped to one tenant (${attempts} attempts: another tenant's node, host privileges, its own policy; operator and generator)`,
      wrong.length,
      0,
    ),
    exactly(SECTION, "a scoped key's placement inside the pool an admin gave its tenant refused", inside ? 0 : 1, 0),
  ];
}
