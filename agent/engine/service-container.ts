// Which running container of a tenant's compose service a command goes to (exec_service and the
// terminals opened over the session): the tenant's project must be one this agent applied, the
// service one of its services, and the replica running (0: the lowest-numbered one).
import { EngineError, runningServiceContainers, type ServiceContainer } from "./project-containers.js";
import { readProjectState } from "./project-state.js";

/** Why no container was found: a result code and its message. */
export interface NoContainer {
  code: "PROJECT_NOT_FOUND" | "SERVICE_NOT_RUNNING" | "DOCKER_UNAVAILABLE";
  message: string;
}

/** The container of `service`'s `replica` in the tenant's project, or why there is none. */
export async function serviceContainerOf(
  workDir: string,
  tenantId: string,
  service: string,
  replica: number,
): Promise<{ container: ServiceContainer } | NoContainer> {
  const state = await readProjectState(workDir, tenantId);
  if (!state) return { code: "PROJECT_NOT_FOUND", message: `tenant ${tenantId} has no project applied on this node` };
  if (!state.services.includes(service))
    return {
      code: "SERVICE_NOT_RUNNING",
      message: `project ${state.project_name} has no service ${service} (it has ${state.services.join(", ")})`,
    };
  let running: ServiceContainer[];
  try {
    running = await runningServiceContainers(state.project_name, service);
  } catch (e) {
    if (e instanceof EngineError) return { code: "DOCKER_UNAVAILABLE", message: e.message };
    throw e;
  }
  const container = replica === 0 ? running[0] : running.find((c) => c.number === replica);
  if (container) return { container };
  const which = replica === 0 ? "no container" : `no replica ${replica}`;
  const numbers = running.map((c) => c.number).join(", ");
  return {
    code: "SERVICE_NOT_RUNNING",
    message: `service ${service} of project ${state.project_name} has ${which} running${numbers ? ` (running: ${numbers})` : ""}`,
  };
}
