// The exec_service executor on a real Docker engine: a tenant's project is two labelled busybox
// containers of service `web` (compose's labels, as a deploy leaves them, replicas 1 and 2) and its
// state record; commands run inside them through `docker exec`, with their exit codes, both
// streams, env, stdin, the replica asked for, and the project's secret values blanked.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJsonString, type MessageInitShape } from "@bufbuild/protobuf";
import { execa } from "execa";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecServiceActionSchema } from "../gen/skipper/v1/order_action_pb.js";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { AgentConfig } from "../agent/config.js";
import { execService } from "../agent/executors/exec-service.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { writeProjectState } from "../agent/engine/project-state.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! exec-service-executor.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const TENANT = "t-exec";
const PROJECT = `skippy-exec-${process.pid}`;
const SECRET = "s3cr3t-value-7f2c";

describe.skipIf(!dockerHost)("exec_service on a real engine", () => {
  let workDir: string;
  const savedHost = process.env.DOCKER_HOST;
  const docker = (...args: string[]) => execa("docker", args, { env: { DOCKER_HOST: dockerHost! } });
  const ctx = (signal = new AbortController().signal): ExecContext => ({
    config: { nodeId: "n1", workDir, allowCommands: [] } as unknown as AgentConfig,
    host: { capabilities: create(NodeCapabilitiesSchema, { dockerAvailable: true }) },
    log: pino({ level: "silent" }),
    signal,
  });
  const exec = async (action: MessageInitShape<typeof ExecServiceActionSchema>, tenantId = TENANT, signal?: AbortSignal) =>
    (
      await execService(
        create(WorkOrderSchema, {
          id: "o-exec",
          type: WorkOrderType.EXEC_SERVICE,
          target: { tenantId, nodeId: "n1" },
          action: { kind: { case: "execService", value: action } },
        }),
        ctx(signal),
      )
    ).result;

  beforeAll(async () => {
    process.env.DOCKER_HOST = dockerHost!;
    workDir = await mkdtemp(join(tmpdir(), "skippy-exec-"));
    await writeProjectState(workDir, {
      schema_version: "v1",
      project_name: PROJECT,
      tenant_id: TENANT,
      spec_hash: "h",
      work_order_id: "o-deploy",
      services: ["web", "worker"],
      applied_at: new Date().toISOString(),
    });
    // The project's .env holds a secret-shaped value; the containers have it in their env.
    await writeFile(join(workDir, "tenants", TENANT, ".env"), `API_TOKEN=${SECRET}\n`);
    for (const n of [2, 1]) {
      await docker(
        "run",
        "-d",
        "--network",
        "none",
        "--name",
        `${PROJECT}-web-${n}`,
        "--label",
        `com.docker.compose.project=${PROJECT}`,
        "--label",
        "com.docker.compose.service=web",
        "--label",
        `com.docker.compose.container-number=${n}`,
        "--env",
        `REPLICA=${n}`,
        "--env",
        `API_TOKEN=${SECRET}`,
        "skipper-busybox:local",
        "sleep",
        "600",
      );
    }
    // A one-off container of the service (`compose run`) is never the one exec picks.
    await docker(
      "run",
      "-d",
      "--network",
      "none",
      "--label",
      `com.docker.compose.project=${PROJECT}`,
      "--label",
      "com.docker.compose.service=web",
      "--label",
      "com.docker.compose.oneoff=True",
      "--label",
      "com.docker.compose.container-number=0",
      "--env",
      "REPLICA=oneoff",
      "skipper-busybox:local",
      "sleep",
      "600",
    );
  }, 60_000);

  afterAll(async () => {
    if (savedHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = savedHost;
    const ids = (await docker("ps", "-aq", "--filter", `label=com.docker.compose.project=${PROJECT}`)).stdout.split("\n").filter(Boolean);
    if (ids.length > 0) await docker("rm", "-f", ...ids);
    await rm(workDir, { recursive: true, force: true });
  });

  it("a command that exits 3 is EXEC_FAILED with its exit code and both streams, not retriable", async () => {
    const r = await exec({ service: "web", argv: ["sh", "-c", "echo out; echo err >&2; exit 3"] });
    expect(r).toMatchObject({ success: false, retriable: false, code: "EXEC_FAILED" });
    expect(r.message).toBe(`"sh" in ${PROJECT}-web-1 exited with code 3`);
    expect(r.details?.exec).toMatchObject({
      service: "web",
      container: `${PROJECT}-web-1`,
      exitCode: 3,
      stdout: "out\n",
      stderr: "err\n",
      truncated: false,
      timedOut: false,
    });
  });

  it("argv is passed as it is, without a shell, and exit 0 is EXEC_OK", async () => {
    const r = await exec({ service: "web", argv: ["echo", "$REPLICA", "a  b", "; true"] });
    expect(r).toMatchObject({ success: true, code: "EXEC_OK" });
    expect(r.details?.exec?.stdout).toBe("$REPLICA a  b ; true\n");
  });

  it("env, user and workdir reach the command", async () => {
    const r = await exec({
      service: "web",
      argv: ["sh", "-c", 'echo "$X $Y"; id -u; pwd'],
      env: { X: "hello", Y: "there" },
      user: "65534",
      workdir: "/tmp",
    });
    expect(r.code).toBe("EXEC_OK");
    expect(r.details?.exec?.stdout).toBe("hello there\n65534\n/tmp\n");
  });

  it("stdin is written to the command, then closed", async () => {
    const r = await exec({ service: "web", argv: ["cat"], stdin: new TextEncoder().encode("line one\nline two\n") });
    expect(r.code).toBe("EXEC_OK");
    expect(r.details?.exec?.stdout).toBe("line one\nline two\n");
  });

  it("replica 0 is the lowest-numbered running container; a replica number picks its own; a one-off is never picked", async () => {
    const first = await exec({ service: "web", argv: ["sh", "-c", "echo $REPLICA"] });
    expect(first.details?.exec).toMatchObject({ stdout: "1\n", container: `${PROJECT}-web-1` });
    const second = await exec({ service: "web", argv: ["sh", "-c", "echo $REPLICA"], replica: 2 });
    expect(second.details?.exec).toMatchObject({ stdout: "2\n", container: `${PROJECT}-web-2` });
    const missing = await exec({ service: "web", argv: ["true"], replica: 3 });
    expect(missing).toMatchObject({ success: false, code: "SERVICE_NOT_RUNNING" });
    expect(missing.message).toMatch(/no replica 3 running \(running: 1, 2\)/);
  });

  it("the project's secret values are blanked from both streams", async () => {
    const r = await exec({ service: "web", argv: ["sh", "-c", "echo token=$API_TOKEN; echo $API_TOKEN >&2"] });
    expect(r.code).toBe("EXEC_OK");
    expect(r.details?.exec?.stdout).toBe("token=[REDACTED]\n");
    expect(r.details?.exec?.stderr).toBe("[REDACTED]\n");
    expect(toJsonString(WorkOrderResultSchema, r)).not.toContain(SECRET);
  });

  it("output past 1 MiB is cut to its first 1 MiB and says so", async () => {
    const r = await exec({ service: "web", argv: ["sh", "-c", "head -c 1300000 /dev/zero | tr '\\0' x; echo done >&2"] });
    expect(r.code).toBe("EXEC_OK");
    expect(r.details?.exec?.stdout.length).toBe(1024 * 1024);
    expect(r.details?.exec).toMatchObject({ truncated: true, stderr: "done\n" });
    expect(r.message).toMatch(/output cut at 1 MiB/);
  });

  it("a service the project lacks, a service without a running container and an unknown project are refused", async () => {
    const unknown = await exec({ service: "db", argv: ["true"] });
    expect(unknown).toMatchObject({ success: false, code: "SERVICE_NOT_RUNNING" });
    expect(unknown.message).toMatch(/has no service db \(it has web, worker\)/);
    const idle = await exec({ service: "worker", argv: ["true"] });
    expect(idle).toMatchObject({ success: false, code: "SERVICE_NOT_RUNNING" });
    expect(idle.message).toMatch(/worker of project .* has no container running/);
    const none = await exec({ service: "web", argv: ["true"] }, "t-nobody");
    expect(none).toMatchObject({ success: false, code: "PROJECT_NOT_FOUND" });
  });

  it("an action the rules refuse is EXEC_INVALID naming the field, and nothing runs", async () => {
    const refused: [MessageInitShape<typeof ExecServiceActionSchema>, string][] = [
      [{ service: "web", argv: [] }, "action.exec_service.argv"],
      [{ service: "web", argv: ["echo", ""] }, "action.exec_service.argv[1]"],
      [{ service: "web", argv: ["touch", "/tmp/made"], workdir: "tmp" }, "action.exec_service.workdir"],
      [{ service: "web", argv: ["touch", "/tmp/made"], user: "root; rm" }, "action.exec_service.user"],
      [{ service: "web", argv: ["touch", "/tmp/made"], env: { "BAD-KEY": "1" } }, "action.exec_service.env"],
    ];
    for (const [action, field] of refused) {
      const r = await exec(action);
      expect(r.code).toBe("EXEC_INVALID");
      expect(r.message.startsWith(`${field} `)).toBe(true);
    }
    expect((await exec({ service: "web", argv: ["test", "-e", "/tmp/made"] })).code).toBe("EXEC_FAILED");
  });

  it("a cancel stops docker exec and is CANCELLED, saying the command may go on", async () => {
    const cancel = new AbortController();
    const running = exec({ service: "web", argv: ["sh", "-c", "echo started; sleep 30"] }, TENANT, cancel.signal);
    // Cancelled once the command is seen running in the container.
    for (;;) {
      const ps = await docker("exec", `${PROJECT}-web-1`, "ps");
      if (ps.stdout.includes("sleep 30")) break;
    }
    cancel.abort(new Error("an operator cancelled it"));
    const r = await running;
    expect(r).toMatchObject({ success: false, code: "CANCELLED" });
    expect(r.message).toMatch(/an operator cancelled it; the command may go on inside the container/);
  }, 30_000);
});
