// Reads a compose project's containers from the engine (by compose's project label, so it works
// the same for v1 and v2) and sums them up per service.
import { create } from "@bufbuild/protobuf";
import {
  ContainerObservationSchema,
  ServiceObservationSchema,
  type ContainerObservation,
  type ServiceObservation,
} from "../../gen/skipper/v1/resource_pb.js";
import { runCommand, type CommandRun } from "./run-command.js";

const TIMEOUT_MS = 30_000;

export interface ProjectContainers {
  /** compose service name -> its containers (sorted by name). */
  byService: Map<string, ContainerObservation[]>;
}

/** Lists the project's containers; throws with the failed command when the engine does not answer. */
export async function readProjectContainers(project: string): Promise<ProjectContainers> {
  const ids = await runCommand("docker", ["ps", "-a", "-q", "--no-trunc", "--filter", `label=com.docker.compose.project=${project}`], {
    timeoutMs: TIMEOUT_MS,
    uncapped: true,
  });
  if (ids.exitCode !== 0) throw new EngineError(ids);
  const list = ids.stdout
    .split("\n")
    .map((s) => s.trim())
    .filter(Boolean);
  const byService = new Map<string, ContainerObservation[]>();
  if (list.length === 0) return { byService };
  const inspect = await runCommand("docker", ["inspect", ...list], { timeoutMs: TIMEOUT_MS, uncapped: true });
  // A container removed between the two calls makes inspect fail for it; the others still print.
  if (inspect.exitCode !== 0 && !inspect.stdout.trim().startsWith("[")) throw new EngineError(inspect);
  const docs = JSON.parse(inspect.stdout || "[]") as InspectDoc[];
  for (const d of docs) {
    const labels = d.Config?.Labels ?? {};
    const service = labels["com.docker.compose.service"] ?? "";
    if (service === "" || labels["com.docker.compose.oneoff"] === "True") continue;
    const obs = create(ContainerObservationSchema, {
      containerId: d.Id,
      name: (d.Name ?? "").replace(/^\//, ""),
      state: d.State?.Status ?? "",
      health: d.State?.Health?.Status ?? "",
      image: d.Config?.Image ?? "",
      restartCount: d.RestartCount ?? 0,
      configHash: labels["com.docker.compose.config-hash"] ?? "",
    });
    const arr = byService.get(service) ?? [];
    arr.push(obs);
    byService.set(service, arr);
  }
  for (const arr of byService.values()) arr.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { byService };
}

/** A running container of a compose service: its id, name and compose's number for it (0 when unlabelled). */
export interface ServiceContainer {
  id: string;
  name: string;
  number: number;
}

/** The running containers of one service of the project, lowest number first; throws EngineError when the engine does not answer. */
export async function runningServiceContainers(project: string, service: string): Promise<ServiceContainer[]> {
  const format = '{{.ID}}\t{{.Names}}\t{{.Label "com.docker.compose.container-number"}}\t{{.Label "com.docker.compose.oneoff"}}';
  const ps = await runCommand(
    "docker",
    [
      "ps",
      "--no-trunc",
      "--filter",
      `label=com.docker.compose.project=${project}`,
      "--filter",
      `label=com.docker.compose.service=${service}`,
      "--format",
      format,
    ],
    { timeoutMs: TIMEOUT_MS, uncapped: true },
  );
  if (ps.exitCode !== 0) throw new EngineError(ps);
  const out: ServiceContainer[] = [];
  for (const line of ps.stdout.split("\n")) {
    const [id, name, number, oneoff] = line.trim().split("\t");
    // A one-off container (`compose run`) is not the service's.
    if (!id || !name || oneoff === "True") continue;
    out.push({ id, name, number: Number.parseInt(number ?? "", 10) || 0 });
  }
  return out.sort((a, b) => a.number - b.number || (a.name < b.name ? -1 : 1));
}

/** running | not_running | unhealthy | starting | missing, from a service's containers. */
export function serviceState(containers: ContainerObservation[]): string {
  if (containers.length === 0) return "missing";
  if (containers.some((c) => c.state !== "running")) return "not_running";
  if (containers.some((c) => c.health === "unhealthy")) return "unhealthy";
  if (containers.some((c) => c.health === "starting")) return "starting";
  return "running";
}

/** One observation per expected service (missing ones included), in the given order. */
export function observeServices(services: string[], seen: ProjectContainers): ServiceObservation[] {
  return services.map((service) => {
    const containers = seen.byService.get(service) ?? [];
    return create(ServiceObservationSchema, { service, containers, state: serviceState(containers) });
  });
}

/** The engine did not answer a query. */
export class EngineError extends Error {
  constructor(readonly run: CommandRun) {
    super(`${run.program} ${run.args.slice(0, 2).join(" ")} failed: ${run.stderr.trim().split("\n").pop() ?? ""}`);
  }
}

interface InspectDoc {
  Id: string;
  Name?: string;
  RestartCount?: number;
  State?: { Status?: string; Health?: { Status?: string } };
  Config?: { Image?: string; Labels?: Record<string, string> };
}
