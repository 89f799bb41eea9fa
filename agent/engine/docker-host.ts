// What this host can run: the Docker engine (through the `docker` CLI, so DOCKER_HOST and
// contexts work as the operator set them up) and Compose, as the v2 plugin (`docker compose`) or
// the v1 binary (`docker-compose`), whichever answers first.
import { existsSync } from "node:fs";
import { arch, hostname, platform } from "node:os";
import { create } from "@bufbuild/protobuf";
import { ComposeVariant, NodeCapabilitiesSchema, type NodeCapabilities, type SshTargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import { runCommand } from "./run-command.js";

/** How to invoke Compose on this host. */
export interface ComposeCli {
  variant: ComposeVariant.PLUGIN_V2 | ComposeVariant.STANDALONE_V1;
  program: string;
  /** Arguments before compose's own (["compose"] for the plugin). */
  baseArgs: string[];
  version: string;
}

export interface DockerHost {
  capabilities: NodeCapabilities;
  /** Undefined when no Compose implementation works. */
  compose?: ComposeCli;
  /** An SSH node's host (agent/relay/): the relay's connection to it, sent with its heartbeats. */
  ssh?: SshTargetStatus;
}

const PROBE_TIMEOUT_MS = 15_000;
// Where systemd keeps its runtime state: present only when systemd is the init system.
const SYSTEMD_RUNTIME = "/run/systemd/system";

/** Probes the engine and Compose. Never throws: what is missing is described in capabilities.message. */
export async function probeDockerHost(): Promise<DockerHost> {
  const problems: string[] = [];
  const engine = await runCommand("docker", ["version", "--format", "{{.Server.Version}}"], { timeoutMs: PROBE_TIMEOUT_MS });
  const dockerAvailable = engine.exitCode === 0 && engine.stdout.trim() !== "";
  if (!dockerAvailable) {
    problems.push(
      engine.notFound ? "docker CLI not found" : `docker engine unreachable: ${firstLine(engine.stderr) || `exit ${engine.exitCode}`}`,
    );
  }
  const compose = await detectCompose();
  if (!compose) problems.push("neither `docker compose` (v2 plugin) nor `docker-compose` (v1) works");
  return {
    compose,
    capabilities: create(NodeCapabilitiesSchema, {
      dockerAvailable,
      dockerVersion: dockerAvailable ? engine.stdout.trim() : "",
      composeVariant: compose?.variant ?? ComposeVariant.NONE,
      composeVersion: compose?.version ?? "",
      os: platform(),
      arch: arch(),
      hostname: hostname(),
      message: problems.join("; "),
      systemd: existsSync(SYSTEMD_RUNTIME),
    }),
  };
}

async function detectCompose(): Promise<ComposeCli | undefined> {
  const v2 = await runCommand("docker", ["compose", "version", "--short"], { timeoutMs: PROBE_TIMEOUT_MS });
  if (v2.exitCode === 0 && /^v?\d+\.\d+/.test(v2.stdout.trim())) {
    return { variant: ComposeVariant.PLUGIN_V2, program: "docker", baseArgs: ["compose"], version: v2.stdout.trim().replace(/^v/, "") };
  }
  const v1 = await runCommand("docker-compose", ["version", "--short"], { timeoutMs: PROBE_TIMEOUT_MS });
  if (v1.exitCode === 0 && /^v?\d+\.\d+/.test(v1.stdout.trim())) {
    return { variant: ComposeVariant.STANDALONE_V1, program: "docker-compose", baseArgs: [], version: v1.stdout.trim().replace(/^v/, "") };
  }
  return undefined;
}

function firstLine(s: string): string {
  return s.trim().split("\n")[0] ?? "";
}
