// SSH nodes' pure parts: the spec's checks at the boundary (each refusal names its field), the
// relay's authority (it acts for the nodes whose spec names it, and no other), ssh's files
// (pinned key, strict checking, the key 0600), fingerprints as ssh-keygen prints them, the paths
// a project would take from the relay's disk, and the SSH node's executor table.
import { create } from "@bufbuild/protobuf";
import { access, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { describe, expect, it } from "vitest";
import { relayedPrincipal } from "../controller/auth/relay-access.js";
import { nodeCredentialHolds } from "../controller/auth/authenticator.js";
import { CredentialEnds } from "../controller/auth/credential-ends.js";
import { AgentTally } from "../agent/agent-tally.js";
import { loadAgentConfig, type AgentConfig } from "../agent/config.js";
import { Heartbeats } from "../agent/heartbeats.js";
import { RelayLoop } from "../agent/relay/relay-loop.js";
import { RelayTargetSchema, type HeartbeatRequest } from "../gen/skipper/v1/node_service_pb.js";
import { waitFor } from "./helpers/processes.js";
import { checkSshTarget } from "../controller/resources/ssh-target-rules.js";
import { relayDiskPaths } from "../agent/relay/remote-files.js";
import { sshExecutors, sshRuns } from "../agent/relay/ssh-executors.js";
import { fingerprintOf, removeSshFiles, writeSshFiles } from "../agent/relay/ssh-files.js";
import { executors } from "../agent/executors/registry.js";
import {
  ComposeVariant,
  NodeCapabilitiesSchema,
  ResourceSchema,
  SshTargetSchema,
  SshTargetState,
  SshTargetStatusSchema,
  type SshTarget,
} from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { ExecContext } from "../agent/executors/executor.js";

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );
const noop = () => undefined;
const quiet: Record<string, unknown> = { debug: noop, info: noop, warn: noop, error: noop, trace: noop, fatal: noop };
quiet.child = () => quiet;

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
      WorkOrderType.DEPLOY_CONTAINER,
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
    // The process kinds run on the node, behind the same check.
    for (const type of [WorkOrderType.DEPLOY_PROCESS, WorkOrderType.CONTROL_PROCESS]) {
      expect((await table[type as keyof typeof table](order(type), ctx)).result).toMatchObject({ code: "HOST_KEY_MISMATCH" });
    }
  });

  it("run the process kinds with the node's own executors; a deploy's process modules are refused (they would run on the relay)", async () => {
    const connected = async () => create(SshTargetStatusSchema, { state: SshTargetState.CONNECTED });
    const ran: WorkOrderType[] = [];
    const mine = (type: WorkOrderType.DEPLOY_PROCESS | WorkOrderType.CONTROL_PROCESS) =>
      Object.assign(async () => (ran.push(type), { result: { code: "MINE" } }) as never, { action: executors()[type].action });
    const own = {
      [WorkOrderType.DEPLOY_PROCESS]: mine(WorkOrderType.DEPLOY_PROCESS),
      [WorkOrderType.CONTROL_PROCESS]: mine(WorkOrderType.CONTROL_PROCESS),
    };
    const table = sshExecutors(executors(), "ssh-a", connected, own as never);
    for (const type of [WorkOrderType.DEPLOY_PROCESS, WorkOrderType.CONTROL_PROCESS]) {
      expect((await table[type as keyof typeof table](order(type), ctx)).result.code).toBe("MINE");
    }
    expect(ran).toEqual([WorkOrderType.DEPLOY_PROCESS, WorkOrderType.CONTROL_PROCESS]);
    const withModules = create(WorkOrderSchema, {
      id: "o2",
      type: WorkOrderType.DEPLOY_SERVICE,
      desiredState: { composeProject: { composeFile: "services: {}\n" }, processes: [{ module: "web" }] },
    });
    const out = await table[WorkOrderType.DEPLOY_SERVICE](withModules, ctx);
    expect(out.result).toMatchObject({ success: false, code: "SSH_RELAY_PROCESSES_REFUSED" });
    expect(out.result.message).toContain("(web)");
  });
});

describe("an SSH node reports only what its table runs", () => {
  const host = {
    capabilities: create(NodeCapabilitiesSchema, { dockerAvailable: true, composeVariant: ComposeVariant.PLUGIN_V2, hostname: "10.0.0.5" }),
  };
  const reported = async (hasExecutor?: (t: WorkOrderType) => boolean, allowProcessSources: string[] = []) => {
    const sent: HeartbeatRequest[] = [];
    const beats = new Heartbeats({
      config: { nodeId: "ssh-a", pollIntervalMs: 1000, allowCommands: [], allowProcessSources, labels: {} } as never,
      clients: { nodes: { heartbeat: async (r: HeartbeatRequest) => (sent.push(r), { pendingWorkOrders: 0 }) } } as never,
      host: { refresh: async () => host } as never,
      tally: new AgentTally(),
      log: quiet as never,
      observe: async () => [],
      hasExecutor,
    });
    await beats.beat();
    const onSession = await beats.report({ observe: false, intervalMs: 1000 });
    return { polled: sent[0]!.capabilities!.capabilities, onSession: onSession.capabilities!.capabilities };
  };

  it("no container.deploy (refused there) and no exec.terminal (no session carries a terminal); Compose it runs", async () => {
    const all = executors();
    const ssh = await reported((t) => sshRuns(all, t));
    // Compose and inspect run over the engine bridge; host files, probes and webhook deliveries would run on the relay: absent.
    expect(ssh.polled).toEqual(["compose.deploy", "compose.rollback", "engine.inspect"]);
    // The refused kinds count as absent even though the table holds a (refusing) executor for them.
    expect(sshRuns(all, WorkOrderType.DEPLOY_CONTAINER)).toBe(false);
    expect(sshRuns(all, WorkOrderType.DEPLOY_SERVICE)).toBe(true);
    // An agent of its own reports container.deploy; exec.terminal only on its session.
    const own = await reported();
    const host = [
      "compose.deploy",
      "compose.rollback",
      "container.deploy",
      "engine.inspect",
      "host.files",
      "host.probe",
      "webhook.deliver",
    ];
    expect(own.polled).toEqual(host);
    expect(own.onSession).toEqual([...host, "exec.terminal"].sort());
    // Given the relay's process sources, it deploys process modules (on the node); systemd it never claims.
    expect(sshRuns(all, WorkOrderType.DEPLOY_PROCESS)).toBe(true);
    const withSources = await reported((t) => sshRuns(all, t), ["/srv/artifacts"]);
    expect(withSources.polled).toEqual(["compose.deploy", "compose.rollback", "engine.inspect", "process.deploy"]);
  });
});

describe("a relayed principal holds while the node's spec names its relay", () => {
  let relayOf = "relay-1";
  let deleted = false;
  const store = {
    getLiveNodeCredential: async (id: string) => (id === "relay-1" ? { tokenHash: "h" } : undefined),
    getResource: async (_type: string, id: string) =>
      id === "ssh-a"
        ? create(ResourceSchema, {
            id,
            desiredState: { kind: { case: "node", value: { ssh: target({ relayNodeId: relayOf }) } } },
            ...(deleted ? { deletion: {} } : {}),
          })
        : undefined,
  } as never;
  const relayed = { kind: "node", nodeId: "ssh-a", relayNodeId: "relay-1", tokenHash: "h" } as const;

  it("holds now; not once the spec names another relay, nor once the node is deleted, nor without the specs to ask", async () => {
    const at = new Date();
    expect(await nodeCredentialHolds(store, relayed, at)).toBe(true);
    relayOf = "relay-2";
    expect(await nodeCredentialHolds(store, relayed, at)).toBe(false);
    relayOf = "relay-1";
    deleted = true;
    expect(await nodeCredentialHolds(store, relayed, at)).toBe(false);
    deleted = false;
    const { getLiveNodeCredential } = store as { getLiveNodeCredential: unknown };
    expect(await nodeCredentialHolds({ getLiveNodeCredential } as never, relayed, at)).toBe(false);
    // The relay's own credential is asked too: a rotated token ends it.
    expect(await nodeCredentialHolds(store, { ...relayed, tokenHash: "old" }, at)).toBe(false);
  });

  it("its streams hear the SSH node's notices as well as the relay's", () => {
    const ends = new CredentialEnds();
    let heard = 0;
    const stop = ends.watch(relayed, () => heard++);
    ends.changed("node:ssh-a");
    ends.changed("node:relay-1");
    ends.changed("node:ssh-b");
    expect(heard).toBe(2);
    stop();
    ends.changed("node:ssh-a");
    expect(heard).toBe(2);
  });
});

describe("a relay's SSH nodes, each on its own", () => {
  it("one that cannot start does not keep the others from starting; one that leaves has its directory (key) removed", async () => {
    const root = await mkdtemp(join(tmpdir(), "skipper-relay-loop-"));
    const stateDir = join(root, "state");
    const key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----";
    // ssh-a's directory is a file: writing its SSH files throws.
    await mkdir(join(stateDir, "relay"), { recursive: true });
    await writeFile(join(stateDir, "relay", "ssh-a"), "not a directory");
    let listed = ["ssh-a", "ssh-b"];
    const relayedFor: string[] = [];
    const warned: string[] = [];
    // Every call the node's Agent makes fails (unary and streams alike).
    const failing = () => {
      const no = Promise.reject(new Error("no controller here"));
      no.catch(() => undefined);
      return Object.assign(no, { [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(new Error("no controller here")) }) });
    };
    const nodeClients = new Proxy({}, { get: () => new Proxy({}, { get: () => failing }) });
    const clients = {
      nodes: {
        listRelayTargets: async (req: { includeKeys?: boolean }) => ({
          targets: listed.map((nodeId) =>
            // A port that refuses at once: the node's probe ends quickly, and so does its close.
            create(RelayTargetSchema, {
              nodeId,
              ssh: target({ address: "127.0.0.1", port: 1 }),
              revision: "r1",
              privateKey: req.includeKeys ? key : "",
            }),
          ),
        }),
      },
      relayFor: (id: string) => (relayedFor.push(id), nodeClients),
    };
    const log = { ...quiet, warn: (_o: unknown, msg: string) => warned.push(msg), child: () => log };
    const config = loadAgentConfig(
      ["--node-id", "relay-1", "--state-dir", stateDir, "--work-dir", join(root, "work"), "--transport", "poll"],
      { SKIPPY_NODE_TOKEN: "t" },
      () => "",
    ) as AgentConfig;
    const stop = new AbortController();
    const loop = new RelayLoop({ config, clients: clients as never, log: log as never, lookMs: 50 });
    const running = loop.run(stop.signal);
    try {
      await waitFor(
        "ssh-b started, ssh-a's failure told",
        async () => (relayedFor.includes("ssh-b") && warned.some((w) => w.includes("ssh-a"))) || undefined,
        20_000,
        20,
      );
      expect(relayedFor).not.toContain("ssh-a");
      expect((await stat(join(stateDir, "relay", "ssh-b", "ssh", "id"))).mode & 0o777).toBe(0o600);
      // ssh-b leaves this relay: its files go, the key first of all.
      listed = ["ssh-a"];
      await waitFor("ssh-b's directory removed", async () => !(await exists(join(stateDir, "relay", "ssh-b"))) || undefined, 20_000, 20);
    } finally {
      stop.abort();
      await running;
      await rm(root, { recursive: true, force: true });
    }
  }, 60_000);

  it("a socket directory too long for its path is a fresh one of a name nobody can guess (0700), removed with the files", async () => {
    const root = await mkdtemp(join(tmpdir(), "skipper-ssh-long-"));
    try {
      const dir = join(root, "x".repeat(90), "ssh");
      const first = await writeSshFiles(dir, target(), "k");
      const second = await writeSshFiles(dir, target(), "k");
      expect(first.socketDir.startsWith(tmpdir())).toBe(true);
      expect(first.socketDir).not.toBe(second.socketDir);
      expect((await stat(first.socketDir)).mode & 0o777).toBe(0o700);
      await removeSshFiles(first, { all: false });
      expect(await exists(first.socketDir)).toBe(false);
      expect(await exists(join(dir, "id"))).toBe(true);
      await removeSshFiles(second, { all: true });
      expect([await exists(second.socketDir), await exists(dir)]).toEqual([false, false]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
