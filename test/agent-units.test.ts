// The agent's pieces that need no engine: configuration, backoff, change detection, command
// output handling, the journal, and the executor's answers when no engine can be reached.
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { removeStaleTemps, writeFileAtomic } from "../agent/engine/durable-file.js";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  ComposePolicyLevel,
  ComposePolicySchema,
  ComposeVariant,
  ContainerObservationSchema,
  NodeCapabilitiesSchema,
} from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { Backoff } from "../common/backoff.js";
import { duration, loadAgentConfig } from "../agent/config.js";
import { chooseCredential } from "../agent/certificate-keeper.js";
import { asResourceIds, containerChanges } from "../agent/executors/container-changes.js";
import { servicesInFile } from "../agent/executors/compose-output.js";
import { composeComplaint } from "../agent/executors/compose-output.js";
import { deployService } from "../agent/executors/deploy-service.js";
import { pullFailure, pullMessage, registryOf } from "../agent/engine/pull-failure.js";
import { failureCause } from "../common/failure-cause.js";
import { withCause } from "../agent/agent-results.js";
import { FailureReason } from "../gen/skipper/v1/failure_cause_pb.js";
import { OUTPUT_CAP_BYTES, runCommand, scrub } from "../agent/engine/run-command.js";
import { Journal } from "../agent/journal.js";
import { checkCommand, validAllowEntry } from "../agent/engine/allow-list.js";
import { digestMismatches } from "../agent/engine/images.js";
import { processSourceAllowed, validProcessSourceEntry } from "../common/action-rules.js";
import { ImageObservationSchema } from "../gen/skipper/v1/order_action_pb.js";
import { enrollmentDone, enrollmentKeyRequest } from "../agent/identity.js";

const noFile = () => {
  throw new Error("no file");
};

describe("durable files", () => {
  it("writes atomically with its mode, and a crash's leftover temp files are removed, nothing else", async () => {
    const dir = await mkdtemp(join(tmpdir(), "skipper-durable-"));
    try {
      await writeFileAtomic(join(dir, ".skipper-state.json"), "{}\n", { mode: 0o600 });
      expect((await stat(join(dir, ".skipper-state.json"))).mode & 0o777).toBe(0o600);
      await writeFile(join(dir, ".skipper-applied.json.0123456789ab.tmp"), "secret");
      await writeFile(join(dir, "notes.tmp"), "keep");
      await removeStaleTemps(dir);
      expect((await readdir(dir)).sort()).toEqual([".skipper-state.json", "notes.tmp"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("allow-list and pinned digests", () => {
  it("allows exactly the listed programs, nothing that merely contains or resembles them", () => {
    const list = ["echo", "/usr/bin/uptime"];
    expect(checkCommand(["echo", "; rm -rf /"], list).allowed).toBe(true);
    expect(checkCommand(["/usr/bin/uptime"], list).allowed).toBe(true);
    for (const argv of [
      ["uptime"],
      ["/bin/echo"],
      ["echo;id"],
      ["echo "],
      ["../echo"],
      ["/usr/bin/../bin/sh"],
      ["sh", "-c", "echo"],
      [""],
      [],
    ]) {
      expect(checkCommand(argv, list).allowed, JSON.stringify(argv)).toBe(false);
    }
    expect(validAllowEntry("/usr/local/bin/deploy-hook")).toBe(true);
    for (const bad of ["sh -c", "a;b", "$(x)", "/a/../b", ""]) expect(validAllowEntry(bad), bad).toBe(false);
  });

  it("takes process artifacts only from allowed URL prefixes and directories", () => {
    const allowed = ["https://artifacts.example/skipper/", "/srv/artifacts"];
    const url = (value: string) => ({ case: "url" as const, value });
    const path = (value: string) => ({ case: "path" as const, value });
    expect(processSourceAllowed(url("https://artifacts.example/skipper/app-1.0.tgz"), allowed)).toBe(true);
    expect(processSourceAllowed(path("/srv/artifacts/app-1.0.tgz"), allowed)).toBe(true);
    for (const bad of [
      url("https://artifacts.example/other/app.tgz"),
      url("http://artifacts.example/skipper/app.tgz"),
      url("https://artifacts.example.evil.net/skipper/app.tgz"),
      url("https://artifacts.example:8443/skipper/app.tgz"),
      url("https://artifacts.example/skipper/../other/app.tgz"),
      url("https://artifacts.example/skipper/%2e%2e/other/app.tgz"),
      url("https://artifacts.example/skipper-evil/app.tgz"),
      url("https://user:pw@artifacts.example/skipper/app.tgz"),
      url("https://artifacts.example/skipper/"),
      url("not a url"),
      path("/srv/artifacts-evil/app.tgz"),
      path("/srv/artifacts/../etc/x"),
      path("/srv/artifacts"),
      path("relative/app.tgz"),
    ]) {
      expect(processSourceAllowed(bad, allowed), bad.value).toBe(false);
    }
    expect(processSourceAllowed(path("/srv/artifacts/app.tgz"), [])).toBe(false);
    // An allowed origin without a path admits everything it serves, and nothing on another host.
    expect(processSourceAllowed(url("https://cdn.example/app.tgz"), ["https://cdn.example"])).toBe(true);
    expect(processSourceAllowed(url("https://cdn.example.evil.net/app.tgz"), ["https://cdn.example"])).toBe(false);
    expect(processSourceAllowed({ case: undefined }, allowed)).toBe(false);
    expect(validProcessSourceEntry("/srv/artifacts")).toBe(true);
    for (const bad of ["srv", "/", "/a/../b", "ftp://x/"]) expect(validProcessSourceEntry(bad), bad).toBe(false);
  });

  it("flags a service whose image is pinned by digest but runs another one", () => {
    const img = (id: string, repoDigests: string[]) => create(ImageObservationSchema, { id, repoDigests });
    const pinned = `sha256:${"a".repeat(64)}`;
    expect(
      digestMismatches([
        { service: "web", reference: `registry.example/web@${pinned}`, image: img("sha256:1", [`registry.example/web@${pinned}`]) },
      ]),
    ).toEqual([]);
    expect(digestMismatches([{ service: "web", reference: "registry.example/web:1.2", image: img("sha256:1", []) }])).toEqual([]);
    const wrong = digestMismatches([
      {
        service: "web",
        reference: `registry.example/web@${pinned}`,
        image: img("sha256:1", [`registry.example/web@sha256:${"b".repeat(64)}`]),
      },
    ]);
    expect(wrong).toHaveLength(1);
    expect(wrong[0]).toContain(`pinned ${pinned}`);
  });
});

describe("agent configuration", () => {
  it("reads flags over environment and normalises the controller URL", () => {
    const cfg = loadAgentConfig(
      ["--node-id", "n1", "--label", "zone=a", "--poll-interval", "250ms"],
      { SKIPPY_NODE_TOKEN: "skn.x.y", SKIPPY_CONTROLLER_URL: "https://ctl:8443/", SKIPPY_LABELS: "env=prod" },
      noFile,
    );
    expect(cfg).toMatchObject({
      nodeId: "n1",
      token: "skn.x.y",
      controllerUrl: "https://ctl:8443/v1",
      pollIntervalMs: 250,
      labels: { env: "prod", zone: "a" },
    });
  });

  it("reads the token from a file and refuses missing or unsafe settings", () => {
    const cfg = loadAgentConfig(["--node-id", "n1", "--token-file", "/t"], {}, () => "skn.file.token\n");
    expect(cfg !== "help" && cfg.token).toBe("skn.file.token");
    expect(() => loadAgentConfig([], { SKIPPY_NODE_TOKEN: "t" }, noFile)).toThrow(/node-id/);
    expect(() => loadAgentConfig(["--node-id", "../x"], { SKIPPY_NODE_TOKEN: "t" }, noFile)).toThrow(/node-id/);
    const enrolling = loadAgentConfig(["--node-id", "n1", "--enroll-token-file", "/e"], {}, () => "ske_0a1b2c3d4e5f_x\n");
    expect(enrolling !== "help" && [enrolling.token, enrolling.enrollToken]).toEqual(["", "ske_0a1b2c3d4e5f_x"]);
    expect(() => loadAgentConfig(["--node-id", "n1", "--label", "a b=c"], { SKIPPY_NODE_TOKEN: "t" }, noFile)).toThrow(/label/);
  });

  it("starts with neither token nor enrollment token only when an earlier enrollment left a certificate", async () => {
    const stateDir = await mkdtemp(join(tmpdir(), "skippy-cred-"));
    const settings = { nodeId: "n1", stateDir, token: "", enrollToken: "" };
    const never = () => {
      throw new Error("no enrollment expected");
    };
    await expect(chooseCredential(settings, never, pino({ level: "silent" }), new AbortController().signal)).rejects.toThrow(
      /a credential is required: --token\/--token-file \(a node token\), or --enroll-token/,
    );
    await expect(
      chooseCredential({ ...settings, token: "skn.a.b" }, never, pino({ level: "silent" }), new AbortController().signal),
    ).resolves.toEqual({
      credential: { token: "skn.a.b" },
    });
    await rm(stateDir, { recursive: true, force: true });
  });

  it("keeps the poll interval within the heartbeat intervals the controller accepts (100 ms .. 5 min)", () => {
    const env = { SKIPPY_NODE_TOKEN: "t" };
    expect(() => loadAgentConfig(["--node-id", "n1", "--poll-interval", "50ms"], env, noFile)).toThrow(/at least 100/);
    expect(() => loadAgentConfig(["--node-id", "n1", "--poll-interval", "6m"], env, noFile)).toThrow(/at most 300000/);
    const cfg = loadAgentConfig(["--node-id", "n1", "--poll-interval", "5m"], env, noFile);
    expect(cfg !== "help" && cfg.pollIntervalMs).toBe(300_000);
  });

  it("parses durations", () => {
    expect([duration("5s", "x", 0), duration("2m", "x", 0), duration("150", "x", 0), duration("1.5s", "x", 0)]).toEqual([
      5000, 120_000, 150, 1500,
    ]);
    expect(() => duration("soon", "x", 0)).toThrow(/duration/);
    expect(() => duration("1ms", "poll interval", 10)).toThrow(/at least 10/);
  });
});

describe("enrollment key", () => {
  it("every attempt, and an agent started again, sends the same key until it has enrolled; then the key request is gone", async () => {
    const state = await mkdtemp(join(tmpdir(), "skippy-state-"));
    try {
      const first = await enrollmentKeyRequest(state, "edge-1");
      expect(await enrollmentKeyRequest(state, "edge-1")).toEqual(first);
      expect((await stat(join(state, "identity", "enrolling.json"))).mode & 0o777).toBe(0o600);
      // Another node id makes a key of its own.
      expect((await enrollmentKeyRequest(state, "edge-2")).keyPem).not.toBe(first.keyPem);
      await enrollmentDone(state);
      expect((await enrollmentKeyRequest(state, "edge-2")).keyPem).not.toBe(first.keyPem);
    } finally {
      await rm(state, { recursive: true, force: true });
    }
  });
});

describe("backoff", () => {
  it("doubles its ceiling per failure up to the cap, with jitter below it, and resets", () => {
    const top = new Backoff(500, 30_000, () => 0.999999);
    const ceilings = Array.from({ length: 9 }, () => top.next());
    expect(ceilings).toEqual([500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
    const low = new Backoff(500, 30_000, () => 0);
    expect(low.next()).toBe(0);
    top.reset();
    expect(top.next()).toBe(500);
  });
});

describe("container changes", () => {
  const c = (id: string, hash: string, state = "running") =>
    create(ContainerObservationSchema, { containerId: id, configHash: hash, state });
  it("counts only services whose containers are the same, same config, running before and after as unchanged", () => {
    const before = new Map([
      ["web", [c("a", "h1")]],
      ["db", [c("b", "h2")]],
      ["old", [c("x", "h9")]],
      ["stopped", [c("s", "h3", "exited")]],
    ]);
    const after = new Map([
      ["web", [c("a", "h1")]],
      ["db", [c("b2", "h2b")]],
      ["new", [c("n", "h4")]],
      ["stopped", [c("s", "h3")]],
    ]);
    expect(containerChanges(before, after)).toEqual({ changed: ["db", "new", "old", "stopped"], unchanged: ["web"] });
    expect(containerChanges(after, after).changed).toEqual([]);
  });

  it("reads the services `up` starts from a plain compose file, and gives up on anything else", () => {
    expect(servicesInFile("services:\n  web:\n    image: a\n  db:\n    image: b\n")).toEqual(["db", "web"]);
    expect(servicesInFile("services:\n  web:\n    image: a\n  debug:\n    image: b\n    profiles: [debug]\n")).toEqual(["web"]);
    for (const odd of ["services: [web]\n", "version: '3'\n", "services:\n  web: 3\n", "services: {\n", "services: {}\n"]) {
      expect(servicesInFile(odd), odd).toBeUndefined();
    }
  });

  it("names changed compose services by the service resources that describe them", () => {
    const composeServices = { "svc-web": "web", "svc-web-canary": "web", "svc-db": "db" };
    expect(asResourceIds(["web", "db", "sidecar"], composeServices)).toEqual(["sidecar", "svc-db", "svc-web", "svc-web-canary"]);
    expect(asResourceIds([], composeServices)).toEqual([]);
  });
});

describe("running commands", () => {
  it("runs argv without a shell: metacharacters stay literal", async () => {
    const r = await runCommand("echo", ["$(id)", ";", "`uname`", "&&", "rm"], { timeoutMs: 5000 });
    expect(r.exitCode).toBe(0);
    expect(r.stdout.trim()).toBe("$(id) ; `uname` && rm");
  });

  it("reports a missing program, a timeout, and caps and scrubs output", async () => {
    expect((await runCommand("definitely-not-a-program-xyz", [], { timeoutMs: 5000 })).notFound).toBe(true);
    const slow = await runCommand("sleep", ["5"], { timeoutMs: 200 });
    expect(slow.timedOut).toBe(true);
    const big = await runCommand("sh", ["-c", `yes hunter2-password | head -c ${OUTPUT_CAP_BYTES * 3}`], {
      timeoutMs: 5000,
      secrets: ["hunter2-password"],
    });
    expect(Buffer.byteLength(big.stdout)).toBeLessThan(OUTPUT_CAP_BYTES + 100);
    expect(big.stdout).not.toContain("hunter2");
    expect(big.stdout).toContain("[REDACTED]");
    expect(scrub("a abc b", ["abc"])).toBe("a abc b"); // too short to be a secret worth blanking
  });
});

describe("journal", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skippy-journal-"));
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  it("keeps claimed orders and their results across instances, oldest first, private to the agent", async () => {
    const j = new Journal(dir);
    await j.open();
    const o1 = create(WorkOrderSchema, { id: "o-1", type: WorkOrderType.DEPLOY_SERVICE, requestId: "r1", correlationId: "c1" });
    const o2 = create(WorkOrderSchema, { id: "o-2", type: WorkOrderType.DEPLOY_SERVICE });
    await j.record({ order: o2, claimedAt: new Date(2000) });
    await j.record({ order: o1, claimedAt: new Date(1000), result: create(WorkOrderResultSchema, { success: true, code: "APPLY_OK" }) });
    const again = new Journal(dir);
    await again.open();
    const { entries, problems } = await again.pending();
    expect(problems).toEqual([]);
    expect(entries.map((e) => [e.order.id, e.order.correlationId, e.result?.code])).toEqual([
      ["o-1", "c1", "APPLY_OK"],
      ["o-2", "", undefined],
    ]);
    expect(((await stat(join(dir, "orders", "o-1.json"))).mode & 0o777).toString(8)).toBe("600");
    await again.remove("o-1");
    expect(await readdir(join(dir, "orders"))).toEqual(["o-2.json"]);
    await expect(j.record({ order: create(WorkOrderSchema, { id: "../evil" }), claimedAt: new Date() })).rejects.toThrow(/safe file name/);
  });

  it("an order journaled before its claim was granted comes back unclaimed, after the claimed ones", async () => {
    const j = new Journal(dir);
    await j.open();
    await j.record({ order: create(WorkOrderSchema, { id: "o-intent" }) });
    await j.record({ order: create(WorkOrderSchema, { id: "o-claimed" }), claimedAt: new Date(5000) });
    const { entries } = await new Journal(dir).pending();
    expect(entries.map((e) => [e.order.id, e.claimedAt?.getTime()])).toEqual([
      ["o-claimed", 5000],
      ["o-intent", undefined],
    ]);
  });
});

describe("a failed pull", () => {
  const images = new Map([
    ["web", "registry.invalid/team/app:1.2"],
    ["db", "busybox:stable"],
  ]);

  it("names the image and service from Compose v1's output, and speaks of credentials only when the registry asked for them", () => {
    const v1 = [
      'Creating network "p_default" with the default driver',
      "Pulling web (registry.invalid/team/app:1.2)...",
      'Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid on 10.255.255.53:53: no such host',
    ].join("\n");
    const f = pullFailure(v1, images)!;
    expect(f).toMatchObject({ code: "IMAGE_PULL_FAILED", image: "registry.invalid/team/app:1.2", service: "web" });
    const dns = pullMessage(f, [], failureCause(v1).reason);
    expect(dns).toBe(
      'image registry.invalid/team/app:1.2 (service web) could not be pulled from registry registry.invalid: Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid on 10.255.255.53:53: no such host',
    );
    expect(dns).not.toMatch(/credential/);
    const auth = [
      "Pulling web (registry.invalid/team/app:1.2)...",
      'Head "https://registry.invalid/v2/team/app/manifests/1.2": no basic auth credentials',
    ].join("\n");
    const asked = pullFailure(auth, images)!;
    expect(pullMessage(asked, [], failureCause(auth).reason)).toContain(
      "from registry registry.invalid (the registry asked for credentials and there is no credential for it: a registry secret of the tenant provides one)",
    );
    expect(pullMessage(asked, ["registry.invalid"], failureCause(auth).reason)).toContain(
      "from registry registry.invalid (logged in with the tenant's credential for registry.invalid, which the registry refused)",
    );
  });

  it("knows which registry an image reference names", () => {
    expect(registryOf("busybox:stable")).toBe("docker.io");
    expect(registryOf("team/app:1")).toBe("docker.io");
    expect(registryOf("127.0.0.1:5000/team/app:1")).toBe("127.0.0.1:5000");
    expect(registryOf("localhost/app")).toBe("localhost");
    expect(registryOf("ghcr.io/org/app@sha256:abc")).toBe("ghcr.io");
  });

  it("an image the registry says does not exist is IMAGE_NOT_FOUND, also from Compose v2's output", () => {
    const v2 =
      " web Error manifest for registry.invalid/team/app:1.2 not found: manifest unknown: manifest unknown\nError response from daemon: manifest for registry.invalid/team/app:1.2 not found: manifest unknown: manifest unknown";
    expect(pullFailure(v2, images)).toMatchObject({ code: "IMAGE_NOT_FOUND", image: "registry.invalid/team/app:1.2", service: "web" });
    const denied =
      "Error response from daemon: pull access denied for private/thing, repository does not exist or may require 'docker login'";
    expect(pullFailure(denied, new Map())).toMatchObject({ code: "IMAGE_NOT_FOUND", image: "private/thing" });
    const unnamed = pullFailure("no such image: Bad:x: invalid reference format: repository name must be lowercase", new Map())!;
    expect(pullMessage(unnamed)).toBe(
      "an image could not be pulled: no such image: Bad:x: invalid reference format: repository name must be lowercase",
    );
  });

  it("is not claimed for other failures", () => {
    expect(pullFailure("ERROR: for web  Cannot start service web: port is already allocated", images)).toBeUndefined();
  });
});

describe("a failed result's cause and retry", () => {
  const failed = (code: string, stderr: string, retriable: boolean, message = "compose up failed (exit 1)") =>
    create(WorkOrderResultSchema, {
      success: false,
      retriable,
      code,
      message,
      details: { command: { program: "docker-compose", stderr } },
    });

  it("a held port is the cause, read past Compose's closing words, and is not retried", () => {
    const stderr =
      "Creating p_web_1 ... error\n\nERROR: for web  Cannot start service web: driver failed programming external connectivity on endpoint p_web_1 (ab12): Error starting userland proxy: listen tcp4 127.0.0.1:28932: bind: address already in use\nERROR: Encountered errors while bringing up the project.";
    const r = withCause(failed("COMPOSE_FAILED", stderr, true));
    expect(r.cause).toMatchObject({ reason: FailureReason.PORT_IN_USE, summary: "port 127.0.0.1:28932 is already in use" });
    expect(r.retriable).toBe(false);
  });

  it("a bad image reference that reached the node is INVALID_REFERENCE, not retried", () => {
    const r = withCause(
      failed("IMAGE_NOT_FOUND", "no such image: Busybox::Stable!: invalid reference format: repository name must be lowercase", false),
    );
    expect(r.cause?.reason).toBe(FailureReason.INVALID_REFERENCE);
    expect(r.retriable).toBe(false);
  });

  it("a registry that may come back is retried; the engine down and a timeout keep what their executor said", () => {
    const rate = withCause(
      failed("IMAGE_PULL_FAILED", "Error response from daemon: toomanyrequests: You have reached your pull rate limit.", false),
    );
    expect(rate).toMatchObject({ retriable: true, cause: { reason: FailureReason.RATE_LIMITED } });
    const down = withCause(failed("DOCKER_UNAVAILABLE", "permission denied while trying to connect to the Docker daemon socket", true));
    expect(down.retriable).toBe(true);
    const unknown = withCause(
      failed("COMPOSE_FAILED", 'ERROR: for web  Cannot start service web: exec: "nope": executable file not found', true),
    );
    expect(unknown).toMatchObject({ retriable: true, cause: { reason: FailureReason.UNKNOWN } });
    expect(unknown.cause?.summary).toContain('Cannot start service web: exec: "nope"');
  });

  it("a failure without output has its message as cause; a success has none", () => {
    const r = withCause(
      create(WorkOrderResultSchema, { success: false, code: "COMPOSE_INVALID", message: "services.web.image must be a string" }),
    );
    expect(r.cause).toMatchObject({ reason: FailureReason.UNKNOWN, summary: "services.web.image must be a string" });
    expect(withCause(create(WorkOrderResultSchema, { success: true, code: "APPLY_OK" })).cause).toBeUndefined();
  });
});

describe("what compose said about a file it rejects", () => {
  it("is one line: what and where, not the last line of a traceback or a staging path", () => {
    const v1Yaml = [
      "yaml.parser.ParserError: while parsing a flow sequence",
      '  in "./docker-compose.yml", line 3, column 12',
      "expected ',' or ']', but got '<stream end>'",
      '  in "./docker-compose.yml", line 4, column 1',
    ].join("\n");
    expect(composeComplaint(v1Yaml, "/w/.staging-1")).toBe(
      "while parsing a flow sequence; expected ',' or ']', but got '<stream end>' (line 3, column 12)",
    );
    const schema =
      "The Compose file '/w/.staging-1/docker-compose.yml' is invalid because:\nservices.web.ports contains an invalid type, it should be an array\n";
    expect(composeComplaint(schema, "/w/.staging-1")).toBe(
      "The Compose file 'docker-compose.yml' is invalid because:; services.web.ports contains an invalid type, it should be an array",
    );
  });
});

describe("deploy_service without a usable engine", () => {
  let workDir: string;
  const saved = process.env.DOCKER_HOST;
  beforeEach(async () => {
    workDir = await mkdtemp(join(tmpdir(), "skippy-work-"));
  });
  afterEach(async () => {
    process.env.DOCKER_HOST = saved;
    if (saved === undefined) delete process.env.DOCKER_HOST;
    await rm(workDir, { recursive: true, force: true });
  });
  const order = (tenantId: string, composeFile = "services:\n  web:\n    image: busybox\n", env: Record<string, string> = {}) =>
    create(WorkOrderSchema, {
      id: "o-1",
      type: WorkOrderType.DEPLOY_SERVICE,
      desiredState: { tenantId, deploymentId: "d-1", composeProject: { composeFile, env } },
    });
  const host = (compose: boolean) => ({
    capabilities: create(NodeCapabilitiesSchema, { message: compose ? "" : "neither compose found" }),
    compose: compose
      ? { variant: ComposeVariant.STANDALONE_V1 as const, program: "docker-compose", baseArgs: [], version: "1.29.2" }
      : undefined,
  });
  const ctx = (compose: boolean) => ({
    workDir,
    docker: host(compose),
    composeTimeoutMs: 10_000,
    readyTimeoutMs: 1000,
    log: pino({ level: "silent" }),
  });

  it("refuses orders that would escape the work dir or break the .env file, before touching anything", async () => {
    expect((await deployService(order("../etc"), ctx(true))).result.code).toBe("COMPOSE_INVALID");
    expect((await deployService(order("Upper Case"), ctx(true))).result.code).toBe("COMPOSE_INVALID");
    expect((await deployService(order("t1", "services: {}\n", { "BAD KEY": "x" }), ctx(true))).result.code).toBe("COMPOSE_INVALID");
    expect((await deployService(order("t1", "services: {}\n", { OK: "line\nbreak" }), ctx(true))).result.code).toBe("COMPOSE_INVALID");
    expect((await deployService(order("t1", "  "), ctx(true))).result.code).toBe("COMPOSE_INVALID");
    expect(await readdir(workDir)).toEqual([]);
  });

  it("refuses a project that breaks the compose policy the order carries, before writing or running anything, and not to be retried", async () => {
    const o = order("t1", "services:\n  web:\n    image: busybox\n    privileged: true\n    volumes: ['/:/host']\n");
    o.desiredState!.composePolicy = create(ComposePolicySchema, { level: ComposePolicyLevel.RESTRICTED });
    const out = await deployService(o, ctx(true));
    expect(out.result.code).toBe("COMPOSE_POLICY_VIOLATION");
    expect(out.result.retriable).toBe(false);
    expect(out.result.message).toContain("services.web.privileged");
    expect(out.result.details?.extra).toEqual({
      violations: ["services.web.privileged: privileged", "services.web.volumes[0]: docker-socket"],
    });
    expect(await readdir(workDir)).toEqual([]);
  });

  it("says DOCKER_UNAVAILABLE when no compose exists or the engine does not answer", async () => {
    const none = await deployService(order("t1"), ctx(false));
    expect(none.result).toMatchObject({ success: false, code: "DOCKER_UNAVAILABLE", message: "neither compose found" });
    process.env.DOCKER_HOST = `unix://${join(workDir, "no-such.sock")}`;
    const down = await deployService(order("t1"), ctx(true));
    expect(down.result.code).toBe("DOCKER_UNAVAILABLE");
    expect(down.result.details?.command?.program).toBe("docker");
    expect(down.result.details?.command?.exitCode).not.toBe(0);
  });
});
