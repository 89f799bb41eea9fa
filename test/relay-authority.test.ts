// A relay's authority over its SSH nodes, through the real server: the SSH key is a fleet secret
// (a tenant's is refused when the node is written), the streams a relay opened for a node end
// when the node's spec stops naming it or the node is deleted, and a relayed node renews no
// certificate.
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newKeyRequest } from "../agent/identity.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { SshTargetSchema, type SshTarget } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { startController, type TestController } from "./helpers/controller.js";
import { rpcError } from "./helpers/errors.js";
import { res } from "./helpers/resources.js";

const HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk4wP8m3Sx1n6lBKbU3rjYfRb0qH7Hq2cJ3bUe0VtWm";
const ssh = (over: { keySecret?: { secretId: string; key: string }; relayNodeId?: string } = {}): SshTarget =>
  create(SshTargetSchema, {
    address: "10.0.0.5",
    user: "deploy",
    hostKey: HOST_KEY,
    keySecret: { secretId: "fleet-key", key: "private" },
    relayNodeId: "relay-1",
    ...over,
  });
const sshNode = (id: string, over: Parameters<typeof ssh>[0] = {}) => res("node", id, { case: "node", value: { ssh: ssh(over) } });

let tc: TestController;
let relayToken: string;
const api = () => tc.client(ResourceService, { admin: true });
const relayed = (nodeId: string) => ({ token: relayToken, headers: { "x-skipper-relay-for": nodeId } });

beforeAll(async () => {
  tc = await startController();
  relayToken = (await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "relay-1" })).token;
  await tc.client(NodeService, { admin: true }).registerNode({ nodeId: "relay-2" });
  await api().createResource({
    resourceType: "tenant",
    resource: res("tenant", "team", { case: "tenant", value: { displayName: "Team" } }),
  });
  const secret = (id: string, tenantId: string) =>
    api().createResource({
      resourceType: "secret",
      resource: res("secret", id, { case: "secret", value: { tenantId, values: { private: "k" } } }),
    });
  await secret("team-key", "team");
  await secret("fleet-key", "");
});
afterAll(async () => {
  await tc?.stop();
});

describe("an SSH node's key", () => {
  it("must be a fleet secret holding the value: a tenant's is refused when the node is written, naming the field", async () => {
    for (const [keySecret, what] of [
      [{ secretId: "team-key", key: "private" }, /names secret team-key, which tenant {2}does not have|which tenant {2}does not have/],
      [{ secretId: "fleet-key", key: "other" }, /names value "other" of secret fleet-key, which it does not hold/],
      [{ secretId: "missing", key: "private" }, /names secret missing, which does not exist/],
    ] as const) {
      const e = await rpcError(api().createResource({ resourceType: "node", resource: sshNode("ssh-refused", { keySecret }) }));
      expect([e.code, e.details.field], e.message).toEqual(["INVALID_REQUEST", "desired_state.node.ssh.key_secret.secret_id"]);
      expect(e.message).toMatch(what);
    }
    await api().createResource({ resourceType: "node", resource: sshNode("ssh-ok") });
    // Named by a node, the key cannot go from under it.
    expect((await rpcError(api().deleteResource({ resourceType: "secret", id: "fleet-key" }))).code).toBe("CONFLICT");
    // The relay is handed only fleet keys.
    const listed = await tc.client(NodeService, { token: relayToken }).listRelayTargets({ nodeId: "relay-1", includeKeys: true });
    expect(listed.targets.find((t) => t.nodeId === "ssh-ok")).toMatchObject({ privateKey: "k", keyProblem: "" });
  });
});

describe("a relay's authority over an SSH node", () => {
  it("its streams for the node end when the node's spec names another relay, or the node is deleted", async () => {
    await api().createResource({ resourceType: "node", resource: sshNode("ssh-moved") });
    await api().createResource({ resourceType: "node", resource: sshNode("ssh-deleted") });
    await api().createResource({ resourceType: "node", resource: sshNode("ssh-bystander") });
    const open = async (nodeId: string) => {
      const stream = tc.client(NodeService, relayed(nodeId)).watchWorkOrders({ nodeId })[Symbol.asyncIterator]();
      await stream.next();
      return stream;
    };
    const moved = await open("ssh-moved");
    const deleted = await open("ssh-deleted");
    // Another node's change says nothing to them: they still hold (no order, no end).
    await api().updateResource({ resourceType: "node", id: "ssh-bystander", labels: { a: "b" }, updateMask: { paths: ["labels"] } });

    await api().updateResource({
      resourceType: "node",
      id: "ssh-moved",
      desiredState: { kind: { case: "node", value: { ssh: ssh({ relayNodeId: "relay-2" }) } } },
    });
    const e = await rpcError(moved.next());
    expect([e.code, e.message]).toEqual(["UNAUTHORIZED", "this node's credential has been revoked"]);
    expect((await rpcError(tc.client(NodeService, relayed("ssh-moved")).heartbeat({ nodeId: "ssh-moved" }))).code).toBe("FORBIDDEN");

    await api().deleteResource({ resourceType: "node", id: "ssh-deleted" });
    expect((await rpcError(deleted.next())).code).toBe("UNAUTHORIZED");
  }, 30_000);

  it("a relayed node renews no certificate: it has none, its relay's credential is the one checked", async () => {
    await api().createResource({ resourceType: "node", resource: sshNode("ssh-renew") });
    const request = await newKeyRequest("ssh-renew");
    const e = await rpcError(
      tc.client(EnrollmentService, relayed("ssh-renew")).renewNodeCertificate({ nodeId: "ssh-renew", csrPem: request.csrPem }),
    );
    expect([e.code, e.message]).toEqual(["FORBIDDEN", "node ssh-renew is relayed over SSH: only its relay's own certificate is renewed"]);
  });
});
