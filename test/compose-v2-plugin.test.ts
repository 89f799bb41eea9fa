// The agent's Compose v2 code path (`docker compose …`), reached through the real docker CLI
// plugin mechanism: a temp DOCKER_CONFIG holds cli-plugins/docker-compose, a shell script that is
// a valid CLI plugin, so the `docker` binary itself finds it, answers its metadata query, and
// passes it the environment. The agent is unchanged; it only inherits DOCKER_CONFIG.
//
// What this checks, honestly: detection (`docker compose version --short` wins over
// `docker-compose`) and invocation (deploy runs `docker compose --project-name … up -d
// --remove-orphans`) through the CLI plugin mechanism. The shim forwards
// to Compose v1, so v2's own behaviour (its parsing, output, container naming) is NOT exercised
// here: the real plugin is not installable on this machine.
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { execa } from "execa";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ComposeVariant } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { probeDockerHost, type DockerHost } from "../agent/engine/docker-host.js";
import { deployService } from "../agent/executors/deploy-service.js";
import { RUN_ID } from "./helpers/processes.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! compose-v2-plugin.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const PROJECT = `v2-shim-${RUN_ID}`;
const ARGV_LOG_VAR = "SKIPPER_COMPOSE_SHIM_ARGV_LOG";

// A docker CLI plugin: `docker-cli-plugin-metadata` -> metadata JSON; otherwise the CLI runs it
// as `docker-compose compose <args…>`. The cli-plugins dir is not on PATH, so `docker-compose`
// below is the v1 binary.
const SHIM = `#!/bin/sh
if [ "$1" = "docker-cli-plugin-metadata" ]; then
  echo '{"SchemaVersion":"0.1.0","Vendor":"skipper-test","Version":"v2.99.0","ShortDescription":"test shim: forwards to docker-compose v1"}'
  exit 0
fi
shift
if [ -n "$${ARGV_LOG_VAR}" ]; then printf '%s\\n' "$*" >> "$${ARGV_LOG_VAR}"; fi
if [ "$1" = "version" ] && [ "$2" = "--short" ]; then echo 2.99.0; exit 0; fi
exec docker-compose "$@"
`;

const COMPOSE_FILE = `services:
  idle:
    image: skipper-busybox:local
    command: ["sh", "-c", "while true; do sleep 1; done"]
    environment:
      SHIM_MODE: \${SHIM_MODE}
    stop_grace_period: 1s
`;

describe.skipIf(!dockerHost)("compose v2 plugin path (docker CLI plugin shim forwarding to v1)", () => {
  const saved = {
    DOCKER_CONFIG: process.env.DOCKER_CONFIG,
    DOCKER_HOST: process.env.DOCKER_HOST,
    [ARGV_LOG_VAR]: process.env[ARGV_LOG_VAR],
  };
  let root: string;
  let workDir: string;
  let argvLog: string;
  let host: DockerHost;
  const engineEnv = () => ({ DOCKER_HOST: dockerHost! });
  const removeProjectContainers = async () => {
    const ids = (
      await execa("docker", ["ps", "-aq", "--filter", `label=com.docker.compose.project=${PROJECT}`], { env: engineEnv() })
    ).stdout
      .split("\n")
      .filter(Boolean);
    if (ids.length > 0) await execa("docker", ["rm", "-f", ...ids], { env: engineEnv(), reject: false });
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-compose-v2-"));
    workDir = join(root, "work");
    argvLog = join(root, "shim-argv.log");
    const plugins = join(root, "docker-config", "cli-plugins");
    await mkdir(plugins, { recursive: true });
    await writeFile(join(plugins, "docker-compose"), SHIM);
    await chmod(join(plugins, "docker-compose"), 0o755);
    // runCommand passes env with extendEnv: the agent's commands see these, and so does `docker`.
    process.env.DOCKER_CONFIG = join(root, "docker-config");
    process.env.DOCKER_HOST = dockerHost!;
    process.env[ARGV_LOG_VAR] = argvLog;
    await removeProjectContainers();
    host = await probeDockerHost();
  }, 60_000);

  afterAll(async () => {
    if (workDir) {
      const dir = join(workDir, "tenants", PROJECT);
      await execa(
        "docker-compose",
        ["-p", PROJECT, "-f", join(dir, "docker-compose.yml"), "--env-file", join(dir, ".env"), "down", "-t", "1"],
        { env: engineEnv(), reject: false },
      );
      await removeProjectContainers().catch(() => undefined);
    }
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    if (root) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("prefers the v2 plugin when the docker CLI has one", async () => {
    // The CLI itself lists the shim as its compose plugin (lookup through DOCKER_CONFIG).
    const info = await execa("docker", ["info", "--format", "{{json .ClientInfo.Plugins}}"], { reject: false });
    expect(info.stdout).toContain("skipper-test");
    expect(host.capabilities.dockerAvailable, host.capabilities.message).toBe(true);
    expect(host.capabilities.composeVariant).toBe(ComposeVariant.PLUGIN_V2);
    expect(host.capabilities.composeVersion).toBe("2.99.0");
    expect(host.compose).toMatchObject({ variant: ComposeVariant.PLUGIN_V2, program: "docker", baseArgs: ["compose"], version: "2.99.0" });
  });

  it("deploys through `docker compose` when only the plugin path is used", async () => {
    await rm(argvLog, { force: true });
    const order = create(WorkOrderSchema, {
      id: "o-v2-shim-1",
      type: WorkOrderType.DEPLOY_SERVICE,
      desiredState: {
        tenantId: PROJECT,
        deploymentId: "d-v2-shim-1",
        serviceIds: ["v2-shim-idle"],
        composeProject: { projectName: PROJECT, composeFile: COMPOSE_FILE, env: { SHIM_MODE: "v2" } },
      },
    });
    const ctx = { workDir, docker: host, composeTimeoutMs: 60_000, readyTimeoutMs: 20_000, log: pino({ level: "silent" }) };
    const { result } = await deployService(order, ctx);
    expect(result.code, result.message).toBe("APPLY_OK");
    expect(result.details?.command).toMatchObject({ program: "docker", exitCode: 0 });
    expect(result.details?.command?.args[0]).toBe("compose");

    const ps = await execa(
      "docker",
      ["ps", "--filter", `label=com.docker.compose.project=${PROJECT}`, "--format", '{{.State}} {{.Label "com.docker.compose.service"}}'],
      { env: engineEnv() },
    );
    expect(ps.stdout.trim().split("\n")).toEqual(["running idle"]);

    // Only calls that went docker -> plugin -> shim are logged here; a direct v1 call logs nothing.
    const lines = (await readFile(argvLog, "utf8").catch(() => "")).split("\n").filter(Boolean);
    const config = lines.filter((l) => / config --services$/.test(l));
    const up = lines.filter((l) => / up -d --remove-orphans$/.test(l));
    // Without pre-deploy hooks `up` is Compose's check of the file: no separate `config` run.
    expect(config, lines.join("\n")).toHaveLength(0);
    expect(up, lines.join("\n")).toHaveLength(1);
    for (const l of [...config, ...up])
      expect(l).toMatch(new RegExp(`^--project-name ${PROJECT} --file \\S+docker-compose\\.yml --env-file \\S+\\.env `));
  }, 120_000);
});
