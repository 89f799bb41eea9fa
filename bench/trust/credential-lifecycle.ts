// Credentials that end, against the built controller as a process. Each case is one figure
// counting wrongful successes (bar 0): a call answered with a credential that had ended, a stream
// it opened that did not end with UNAUTHORIZED within STREAM_END_MS (no order or event is made to
// wake it), an order delivered to it after it ended, a used enrollment token accepted for another
// key or node. And the other way: what must keep working (a host's own enrollment retry, an
// enrolled certificate through a token rotation) counts wrongful refusals.
import { join } from "node:path";
import type { Client } from "@connectrpc/connect";
import { Role } from "../../gen/skipper/v1/access_pb.js";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { EnrollmentService } from "../../gen/skipper/v1/enrollment_service_pb.js";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { newKeyRequest } from "../../agent/identity.js";
import { exactly, info, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { anonymous, openWatch, outcome, withBearer, withCert, type CertPair, type Outcome, type StreamEnd } from "./credential-clients.js";

const SECTION = "credential lifecycle";
// How long a stream may go on after its credential ended.
const STREAM_END_MS = 5000;

export const credentialLifecycleProbe: Probe = {
  name: "credential-lifecycle",
  async run({ workDir, log }) {
    const ctl = await startController({ dataDir: join(workDir, "data") });
    try {
      const ends: string[] = [];
      const figures = [
        ...(await rotatedToken(ctl, log, ends)),
        ...(await mintedCertificates(ctl, log, ends)),
        ...(await enrollment(ctl, log)),
        ...(await revokedCertificates(ctl, log, ends)),
        ...(await revokedApiKey(ctl, log, ends)),
      ];
      figures.push(info(SECTION, "open streams ended after their credential ended (UNAUTHORIZED)", ends.join(", ")));
      figures.push(exactly(SECTION, "controller down afterwards", ctl.alive() ? 0 : 1, 0));
      return figures;
    } finally {
      await ctl.stop();
    }
  },
};

type Log = (m: string) => void;

/** A case's figure: `wrong` lists the wrongful outcomes among `of` attempts. */
function tally(name: string, wrong: string[], of: number, log: Log): Figure {
  log(`${name}: ${wrong.length} of ${of} wrong${wrong.length ? `: ${wrong.join("; ")}` : ""}`);
  return exactly(SECTION, name, wrong.length, 0, of);
}

/** Collects refusals that should have been (a call not refused with UNAUTHORIZED is wrong). */
function refusals() {
  const wrong: string[] = [];
  let of = 0;
  return {
    wrong,
    get of() {
      return of;
    },
    call(what: string, got: Outcome) {
      of++;
      if (got !== "UNAUTHORIZED") wrong.push(`${what}: ${got}`);
    },
    stream(what: string, got: StreamEnd) {
      of++;
      if (got.end !== "UNAUTHORIZED") wrong.push(`${what}: ${got.end} after ${Math.round(got.afterMs)} ms`);
      if (got.carried > 0) wrong.push(`${what}: ${got.carried} message(s) carried after the end`);
    },
  };
}

const withOrder = (m: { workOrder?: unknown }) => m.workOrder !== undefined;

/** Opens an order watch for `nodeId` with a client, and checks its first message came. */
async function orderWatch(client: Client<typeof NodeService>, nodeId: string) {
  const w = await openWatch((signal) => client.watchWorkOrders({ nodeId }, { signal }));
  if (w.first !== "ok") throw new Error(`an order watch for ${nodeId} did not open: ${w.first}`);
  return w;
}

async function rotatedToken(ctl: ControllerProcess, log: Log, ends: string[]): Promise<Figure[]> {
  const nodes = ctl.admin(NodeService);
  const nodeId = "cred-rotated";
  const { token } = await nodes.registerNode({ nodeId });
  const watch = await orderWatch(withBearer(ctl, NodeService, token), nodeId);
  const { token: second } = await nodes.rotateNodeToken({ nodeId });
  const old = withBearer(ctl, NodeService, token);
  const r = refusals();
  // The open watch first, with nothing else happening: no order or call wakes it.
  const end = await watch.ended(STREAM_END_MS, withOrder);
  ends.push(`rotated token ${Math.round(end.afterMs)} ms`);
  r.stream("its order watch opened before the rotation", end);
  r.call("a heartbeat", await outcome(old.heartbeat({ nodeId })));
  r.call("a claim", await outcome(old.claimNextWorkOrder({ nodeId })));
  r.call("a new order watch", (await openWatch((signal) => old.watchWorkOrders({ nodeId }, { signal }))).first);
  const csr = await newKeyRequest(nodeId);
  r.call(
    "a certificate for a new key",
    await outcome(withBearer(ctl, EnrollmentService, token).renewNodeCertificate({ nodeId, csrPem: csr.csrPem })),
  );
  // An order queued the moment the token is rotated again is not delivered on the old token's watch.
  const raced = await orderWatch(withBearer(ctl, NodeService, second), nodeId);
  await nodes.rotateNodeToken({ nodeId });
  await ctl.admin(WorkOrderService).createWorkOrder({
    type: WorkOrderType.EXECUTE_COMMAND,
    target: { nodeId },
    action: { kind: { case: "executeCommand", value: { command: { argv: ["true"] } } } },
  });
  r.stream("its order watch, an order queued right after the rotation", await raced.ended(STREAM_END_MS, withOrder));
  return [tally("rotated node token: calls answered, watches not ended UNAUTHORIZED or that carried an order", r.wrong, r.of, log)];
}

async function mintedCertificates(ctl: ControllerProcess, log: Log, ends: string[]): Promise<Figure[]> {
  const nodes = ctl.admin(NodeService);
  const nodeId = "cred-minted";
  const { token } = await nodes.registerNode({ nodeId });
  const request = await newKeyRequest(nodeId);
  const minted = await withBearer(ctl, EnrollmentService, token).renewNodeCertificate({ nodeId, csrPem: request.csrPem });
  const cert: CertPair = { certPem: minted.certificatePem, keyPem: request.keyPem };
  const next = await newKeyRequest(nodeId);
  const renewed = await withCert(ctl, EnrollmentService, cert).renewNodeCertificate({ nodeId, csrPem: next.csrPem });
  const child: CertPair = { certPem: renewed.certificatePem, keyPem: next.keyPem };
  // Both work before the rotation (else the refusals below would prove nothing).
  for (const c of [cert, child]) {
    const before = await outcome(withCert(ctl, NodeService, c).heartbeat({ nodeId }));
    if (before !== "ok") throw new Error(`a certificate minted with a node token did not work before the rotation: ${before}`);
  }
  const watch = await orderWatch(withCert(ctl, NodeService, child), nodeId);
  await nodes.rotateNodeToken({ nodeId });
  const r = refusals();
  const end = await watch.ended(STREAM_END_MS, withOrder);
  ends.push(`certificate minted with a rotated token ${Math.round(end.afterMs)} ms`);
  r.stream("the renewed certificate's order watch", end);
  for (const [name, c] of [
    ["minted", cert],
    ["renewed", child],
  ] as const) {
    r.call(`${name} certificate, a heartbeat`, await outcome(withCert(ctl, NodeService, c).heartbeat({ nodeId })));
    const csr = await newKeyRequest(nodeId);
    r.call(
      `${name} certificate, a renewal`,
      await outcome(withCert(ctl, EnrollmentService, c).renewNodeCertificate({ nodeId, csrPem: csr.csrPem })),
    );
  }
  return [
    tally("certificates minted with a rotated node token (and renewed from them): calls answered, watch not ended", r.wrong, r.of, log),
  ];
}

async function enrollment(ctl: ControllerProcess, log: Log): Promise<Figure[]> {
  const nodeId = "cred-enrolled";
  // Not bound to a node: the replay for another node is then refused for being a replay, not for the binding.
  const { token } = await ctl.admin(EnrollmentService).createEnrollmentToken({});
  const enroll = (node: string, csrPem: string) =>
    anonymous(ctl, EnrollmentService).enrollNode({ enrollmentToken: token, nodeId: node, csrPem });
  const key = await newKeyRequest(nodeId);
  const first = await enroll(nodeId, key.csrPem);
  const refusedOwn: string[] = [];
  const retry = await outcome(enroll(nodeId, key.csrPem));
  if (retry !== "ok") refusedOwn.push(`the host's retry (same node, same key): ${retry}`);
  const replays = refusals();
  replays.call("same node, another key", await outcome(enroll(nodeId, (await newKeyRequest(nodeId)).csrPem)));
  replays.call("another node, another key", await outcome(enroll("cred-replayed", (await newKeyRequest("cred-replayed")).csrPem)));
  replays.call("another node, the same key", await outcome(enroll("cred-replayed", key.csrPem)));
  const again = await outcome(enroll(nodeId, key.csrPem));
  if (again !== "ok") refusedOwn.push(`the host's retry after the replays: ${again}`);
  // Its certificate is its own: a token rotation of the node does not end it, nor the watch it holds.
  const own: CertPair = { certPem: first.certificatePem, keyPem: key.keyPem };
  const watch = await orderWatch(withCert(ctl, NodeService, own), nodeId);
  const rotated = await outcome(ctl.admin(NodeService).rotateNodeToken({ nodeId }));
  if (rotated !== "ok") refusedOwn.push(`the enrolled node's token rotation (needed for the check): ${rotated}`);
  const beat = await outcome(withCert(ctl, NodeService, own).heartbeat({ nodeId }));
  if (beat !== "ok") refusedOwn.push(`the enrolled certificate after a token rotation: ${beat}`);
  const kept = await watch.ended(1000, withOrder);
  if (kept.end !== "open") refusedOwn.push(`the enrolled certificate's watch after a token rotation: ${kept.end}`);
  return [
    tally(
      "used single-use enrollment token replayed within 10 min with another key or for another node: accepted",
      replays.wrong,
      replays.of,
      log,
    ),
    tally(
      "what must keep working refused: a host's own enrollment retry (twice), its certificate and watch through a token rotation",
      refusedOwn,
      5,
      log,
    ),
  ];
}

async function revokedCertificates(ctl: ControllerProcess, log: Log, ends: string[]): Promise<Figure[]> {
  const nodeId = "cred-revoked";
  const { token } = await ctl.admin(EnrollmentService).createEnrollmentToken({ nodeId });
  const key = await newKeyRequest(nodeId);
  const res = await anonymous(ctl, EnrollmentService).enrollNode({ enrollmentToken: token, nodeId, csrPem: key.csrPem });
  const own: CertPair = { certPem: res.certificatePem, keyPem: key.keyPem };
  const watch = await orderWatch(withCert(ctl, NodeService, own), nodeId);
  await ctl.admin(EnrollmentService).revokeNodeCertificates({ nodeId, reason: "trust probe" });
  const r = refusals();
  const end = await watch.ended(STREAM_END_MS, withOrder);
  ends.push(`revoked certificate ${Math.round(end.afterMs)} ms`);
  r.stream("its open order watch", end);
  r.call("a heartbeat", await outcome(withCert(ctl, NodeService, own).heartbeat({ nodeId })));
  r.call("a new order watch", (await openWatch((signal) => withCert(ctl, NodeService, own).watchWorkOrders({ nodeId }, { signal }))).first);
  const csr = await newKeyRequest(nodeId);
  r.call("a renewal", await outcome(withCert(ctl, EnrollmentService, own).renewNodeCertificate({ nodeId, csrPem: csr.csrPem })));
  return [tally("revoked node certificates: calls answered, watch not ended UNAUTHORIZED", r.wrong, r.of, log)];
}

async function revokedApiKey(ctl: ControllerProcess, log: Log, ends: string[]): Promise<Figure[]> {
  const access = ctl.admin(AccessService);
  const { secret, apiKey } = await access.createApiKey({ name: "trust-revoked", role: Role.OPERATOR });
  const events = withBearer(ctl, EventService, secret);
  const watch = await openWatch((signal) => events.watchEvents({}, { signal }));
  if (watch.first !== "ok") throw new Error(`an event watch did not open: ${watch.first}`);
  await access.revokeApiKey({ id: apiKey!.id, reason: "trust probe" });
  const r = refusals();
  // Events are not counted here: the revocation's own event may be read before the stream learns it.
  const end = await watch.ended(STREAM_END_MS, () => false);
  ends.push(`revoked API key ${Math.round(end.afterMs)} ms`);
  r.stream("its open event watch", end);
  r.call("a read", await outcome(withBearer(ctl, ResourceService, secret).listResources({ resourceType: "tenant" })));
  r.call(
    "a write",
    await outcome(
      withBearer(ctl, ResourceService, secret).createResource({
        resourceType: "tenant",
        resource: { id: "cred-after-revoke", resourceType: "tenant", desiredState: { kind: { case: "tenant", value: {} } } },
      }),
    ),
  );
  r.call("a new event watch", (await openWatch((signal) => events.watchEvents({}, { signal }))).first);
  return [tally("revoked API key: calls answered, event watch not ended UNAUTHORIZED", r.wrong, r.of, log)];
}
