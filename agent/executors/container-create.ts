// How the container executor creates a container from its spec: `docker container create` options
// (Skipper's labels, restart policy, ports, mounts, healthcheck) with the verified image id last,
// and the hash of everything that makes up the container, kept as its skipper.spec label so that a
// run of the same order finds its container already made.
import { createHash } from "node:crypto";
import { lstat, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { toJson } from "@bufbuild/protobuf";
import { ContainerSpecSchema, type ContainerSpec } from "../../gen/skipper/v1/order_action_pb.js";
import { isSecretKey } from "../../common/logging/redact.js";
import { createContainer } from "../engine/container-engine.js";
import { LABEL } from "./container-state.js";

/** The hash a container of `spec` on image `imageId` is labelled with. */
export function specHash(spec: ContainerSpec, imageId: string): string {
  const canonical = JSON.stringify(sorted({ spec: toJson(ContainerSpecSchema, spec), imageId }));
  return createHash("sha256").update(canonical).digest("hex");
}

function sorted(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sorted);
  if (v && typeof v === "object")
    return Object.fromEntries(
      Object.entries(v)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([k, x]) => [k, sorted(x)]),
    );
  return v;
}

/** The values of the spec's secret-shaped variables: blanked from anything the engine answers. */
export function secretValues(spec: ContainerSpec): string[] {
  return Object.entries(spec.env)
    .filter(([k]) => isSecretKey(k))
    .map(([, v]) => v);
}

/** Where a mount's ./relative source lives: the agent's own directory for the container. */
export function mountDir(workDir: string, name: string, source: string): string {
  return join(workDir, "containers", name, source.slice(2));
}

/**
 * Why the ./relative mount sources of `spec` cannot be made safely, or undefined. A container may
 * have written a symbolic link into its own directory (`./data/esc -> /`): a source through it
 * would make the agent create directories, and Docker bind, outside the container's directory.
 */
export async function mountSourcesProblem(workDir: string, spec: ContainerSpec): Promise<string | undefined> {
  for (const [i, m] of spec.mounts.entries()) {
    if (!m.source.startsWith("./")) continue;
    const problem = await walkMountDir(workDir, spec.name, m.source, false);
    if (problem) return `mounts[${i}].source ${problem}`;
  }
  return undefined;
}

/** Creates a ./relative mount source one directory at a time, never through a symbolic link. */
function makeMountDir(workDir: string, name: string, source: string): Promise<string | undefined> {
  return walkMountDir(workDir, name, source, true);
}

async function walkMountDir(workDir: string, name: string, source: string, make: boolean): Promise<string | undefined> {
  let at = workDir;
  for (const part of [
    "containers",
    name,
    ...source
      .slice(2)
      .split("/")
      .filter((p) => p !== "" && p !== "."),
  ]) {
    at = join(at, part);
    const st = await lstat(at).catch((e: NodeJS.ErrnoException) => {
      if (e.code === "ENOENT") return undefined;
      throw e;
    });
    if (st?.isSymbolicLink()) return `passes through a symbolic link (${at}): refused, it could lead outside the container's directory`;
    if (st && !st.isDirectory()) return `passes through ${at}, which is not a directory`;
    if (!st && !make) return undefined;
    if (!st) await mkdir(at, { mode: 0o755 });
  }
  return undefined;
}

/** Creates the container `spec` describes from image `imageId` (not started); returns its id. */
export async function createFromSpec(
  spec: ContainerSpec,
  made: { imageId: string; digest: string; hash: string; orderId: string; workDir: string },
): Promise<string> {
  const labels: Record<string, string> = {
    ...spec.labels,
    [LABEL.container]: spec.name,
    [LABEL.spec]: made.hash,
    [LABEL.image]: spec.image,
    [LABEL.digest]: made.digest,
    [LABEL.order]: made.orderId,
  };
  const args = ["--name", spec.name, "--restart", spec.restartPolicy || "unless-stopped"];
  for (const [k, v] of Object.entries(labels)) args.push("--label", `${k}=${v}`);
  for (const p of spec.ports) args.push("--publish", publishOf(p));
  for (const m of spec.mounts) {
    const bind = m.source.startsWith("./");
    const source = bind ? mountDir(made.workDir, spec.name, m.source) : m.source;
    if (bind) {
      const problem = await makeMountDir(made.workDir, spec.name, m.source);
      if (problem) throw new Error(problem);
    }
    args.push("--mount", `type=${bind ? "bind" : "volume"},source=${source},target=${m.target}${m.readOnly ? ",readonly" : ""}`);
  }
  if (spec.healthCommand !== "")
    args.push("--health-cmd", spec.healthCommand, "--health-interval", "1s", "--health-timeout", "5s", "--health-retries", "3");
  if (spec.stopTimeoutSeconds > 0) args.push("--stop-timeout", String(spec.stopTimeoutSeconds));
  return createContainer(made.workDir, args, made.imageId, spec.args, { ...spec.env }, secretValues(spec));
}

function publishOf(p: { hostPort: number; containerPort: number; protocol: string; hostIp: string }): string {
  const ip = p.hostIp === "" ? "" : p.hostIp.includes(":") && !p.hostIp.startsWith("[") ? `[${p.hostIp}]` : p.hostIp;
  const container = `${p.containerPort}/${p.protocol || "tcp"}`;
  if (p.hostPort === 0) return ip ? `${ip}::${container}` : container;
  return `${ip ? `${ip}:` : ""}${p.hostPort}:${container}`;
}
