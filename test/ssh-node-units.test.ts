// SSH nodes' pure parts: the spec's checks at the boundary (each refusal names its field), the
// relay's authority (it acts for the nodes whose spec names it, and no other), ssh's files
// (pinned key, strict checking, the key 0600), fingerprints as ssh-keygen prints them, the paths
// a project would take from the relay's disk, and the SSH node's executor table.
import { create } from "@bufbuild/protobuf";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { relayedPrincipal } from "../controller/auth/relay-access.js";
import { checkSshTarget } from "../controller/resources/ssh-target-rules.js";
import { relayDiskPaths } from "../agent/relay/remote-files.js";
import { sshExecutors } from "../agent/relay/ssh-executors.js";
import { fingerprintOf, writeSshFiles } from "../agent/relay/ssh-files.js";
import { executors } from "../agent/executors/registry.js";
import { ResourceSchema, SshTargetSchema, SshTargetState, SshTargetStatusSchema, type SshTarget } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { ExecContext } from "../agent/executors/executor.js";

const HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk4wP8m3Sx1n6lBKbU3rjYfRb0qH7Hq2cJ3bUe0VtWm host";
const target = (over: Partial<SshTarget> = {}): SshTarget =>
  Object.assign(
    create(SshTargetSchema, {
      address: "10.0.0.5",
      port: 2222,
      user: "deploy",
      hostKey: HOST_KEY,
      keySecret: { secretId: "keys", key: "deploy" },
      relayNodeId: "relay-1",
    }),
    over,
  );

describe("an SSH target is checked at the boundary", () => {
  it("a well-formed target passes", () => {
    expect(() => checkSshTarget(target())).not.toThrow();
    expect(() => checkSshTarget(target({ address: "fd00::5", port: 0 }))).not.toThrow();
    expect(() => checkSshTarget(target({ address: "host-1.example.com" }))).not.toThrow();
  });

  it.each([
    ["address", { address: "" }],
    ["address", { address: "-oProxyCommand=x" }],
    ["address", { address: "user@host" }],
    ["address", { address: "host name" }],
    ["port", { port: 70000 }],
    ["user", { user: "-l" }],
    ["user", { user: "Root User" }],
    ["host_key", { hostKey: "not a key" }],
    ["host_key", { hostKey: `${HOST_KEY}\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk4wP8m3Sx1n6lBKbU3rjYfRb0qH7Hq2cJ3bUe0VtWm` }],
    ["key_secret", { keySecret: undefined }],
    ["key_secret.key", { keySecret: { secretId: "keys", key: "" } as never }],
    ["relay_node_id", { relayNodeId: "" }],
  ])("a bad %s is INVALID_REQUEST (Connect's INVALID_ARGUMENT) naming desired_state.node.ssh.%s", (field, over) => {
    let err: unknown;
    try {
      checkSshTarget(target(over as Partial<SshTarget>));
    } catch (e) {
      err = e;
    }
    expect(err).toMatchObject({ code: "INVALID_REQUEST", details: { field: `desired_state.node.ssh.${field}` } });
  });
});

describe("a relay acts for the SSH nodes that name it, and no other", () => {
  const nodes = {
    getResource: async (_type: string, id: string) =>
      ({
        "ssh-a": create(ResourceSchema, { id: "ssh-a", desiredState: { kind: { case: "node", value: { ssh: target() } } } }),
        "ssh-b": create(ResourceSchema, {
          id: "ssh-b",
          desiredState: { kind: { case: "node", value: { ssh: target({ relayNodeId: "relay-2" }) } } },
        }),
        plain: create(ResourceSchema, { id: "plain", desiredState: { kind: { case: "node", value: {} } } }),
      })[id],
  } as never;
  const relay = { kind: "node", nodeId: "relay-1", tokenHash: "h" } as const;

  it("for a node whose spec names it, it is that node, relayed", async () => {
    expect(await relayedPrincipal(nodes, relay, "ssh-a")).toEqual({
      kind: "node",
      nodeId: "ssh-a",
      relayNodeId: "relay-1",
      tokenHash: "h",
    });
  });

  it.each(["ssh-b", "plain", "missing", "../x"])("for %s it is FORBIDDEN", async (id) => {
    await expect(relayedPrincipal(nodes, relay, id)).rejects.toMatchObject({ code: "FORBIDDEN" });
  });

  it("only a node's own credential may relay (not an admin, not a relayed principal)", async () => {
    await expect(relayedPrincipal(nodes, { kind: "admin" }, "ssh-a")).rejects.toMatchObject({ code: "FORBIDDEN" });
    await expect(relayedPrincipal(nodes, { ...relay, nodeId: "ssh-a", relayNodeId: "relay-1" }, "ssh-a")).rejects.toMatchObject({
      code: "FORBIDDEN",
    });
  });
});

describe("ssh's files for a node", () => {
  it("pin the host key, check it strictly, use only the node's key (0600), and nothing else", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-ssh-files-"));
    try {
      const files = await writeSshFiles(
        join(dir, "n"),
        target(),
        "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
      );
      const config = await readFile(files.config, "utf8");
      for (const line of [
        "StrictHostKeyChecking yes",
        "IdentitiesOnly yes",
        "BatchMode yes",
        "HostKeyAlgorithms ssh-ed25519",
        "ControlMaster auto",
        "Port 2222",
        "User deploy",
      ])
        expect(config).toContain(line);
      expect(config).toContain(`UserKnownHostsFile ${join(dir, "n", "known_hosts")}`);
      expect(await readFile(join(dir, "n", "known_hosts"), "utf8")).toBe(`skipper-target ${HOST_KEY.split(" ").slice(0, 2).join(" ")}\n`);
      expect((await stat(join(dir, "n", "id"))).mode & 0o777).toBe(0o600);
      expect((await stat(join(dir, "n"))).mode & 0o777).toBe(0o700);
      // ssh itself reads the file without complaint (-G prints the configuration it resolved).
      const resolved = await execa("ssh", ["-G", "-F", files.config, "skipper-target"]);
      expect(resolved.stdout).toContain("hostname 10.0.0.5");
      expect(resolved.stdout).toContain("stricthostkeychecking true");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("fingerprints are ssh-keygen's", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-ssh-fp-"));
    try {
      await execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(dir, "k")]);
      const pub = await readFile(join(dir, "k.pub"), "utf8");
      const printed = (await execa("ssh-keygen", ["-l", "-E", "sha256", "-f", join(dir, "k.pub")])).stdout.split(" ")[1];
      expect(fingerprintOf(pub)).toBe(printed);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("what a project would take from the relay's disk", () => {
  const order = (composeFile: string, secretFiles: Record<string, never> = {}) =>
    create(WorkOrderSchema, { desiredState: { composeProject: { composeFile, secretFiles } } });

  it("relative binds, relative secret and config files, and secret_files are named; the rest passes", () => {
    const yaml = [
      "services:",
      "  web:",
      "    image: x",
      "    volumes: ['./data:/data', 'named:/n', '/srv/abs:/abs', {type: bind, source: conf, target: /c}, {type: volume, source: v, target: /v}]",
      "secrets:",
      "  s1: {file: ./s1.txt}",
      "  s2: {file: /etc/abs.txt}",
      "configs:",
      "  c1: {file: c1.conf}",
    ].join("\n");
    expect(relayDiskPaths(order(yaml, { tls: {} as never }))).toEqual([
      "secret_files.tls (secret files are written on the relay)",
      "services.web.volumes[0] (./data)",
      "services.web.volumes[3] (conf)",
      "secrets.s1.file (./s1.txt)",
      "configs.c1.file (c1.conf)",
    ]);
    expect(relayDiskPaths(order("services:\n  web:\n    image: x\n    volumes: ['named:/n', '/abs:/abs']\n"))).toEqual([]);
  });
});

describe("an SSH node's executors", () => {
  const ctx = {} as ExecContext;
  const order = (type: WorkOrderType) =>
    create(WorkOrderSchema, { id: "o1", type, desiredState: { composeProject: { composeFile: "services: {}\n" } } });

  it("refuse the kinds that act on the host itself, with the reason", async () => {
    const table = sshExecutors(executors(), "ssh-a", async () => create(SshTargetStatusSchema, { state: SshTargetState.CONNECTED }));
    for (const type of [
      WorkOrderType.EXECUTE_COMMAND,
      WorkOrderType.UPLOAD_FILES,
      WorkOrderType.DEPLOY_PROCESS,
      WorkOrderType.HEALTH_CHECK,
    ]) {
      const out = await table[type as keyof typeof table](order(type), ctx);
      expect(out.result).toMatchObject({ success: false, code: "UNSUPPORTED_ORDER_TYPE" });
      expect(out.result.message).toContain("do not run on SSH node ssh-a");
    }
  });

  it("fail an order before it runs when the connection is refused, with the connection's status", async () => {
    const status = create(SshTargetStatusSchema, { state: SshTargetState.HOST_KEY_MISMATCH, message: "host key mismatch: …" });
    const table = sshExecutors(executors(), "ssh-a", async () => status);
    const out = await table[WorkOrderType.DEPLOY_SERVICE](order(WorkOrderType.DEPLOY_SERVICE), ctx);
    expect(out.result).toMatchObject({ success: false, retriable: false, code: "HOST_KEY_MISMATCH", details: { ssh: status } });
    const unreachable = sshExecutors(executors(), "ssh-a", async () =>
      create(SshTargetStatusSchema, { state: SshTargetState.UNREACHABLE }),
    );
    expect((await unreachable[WorkOrderType.INSPECT](order(WorkOrderType.INSPECT), ctx)).result).toMatchObject({
      code: "SSH_UNREACHABLE",
      retriable: true,
    });
  });
});
