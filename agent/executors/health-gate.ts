// Deciding whether a deploy is healthy: every service of the project has its containers running
// (and healthy, where the compose file defines a healthcheck) and every probe of the tenant's
// health gate passes — all at once, before the deadline. The verdict
// carries the last observation, so a failure says exactly what was wrong. Checked at once (after
// `up -d` containers usually run already), then at growing intervals up to half a second.
import type { ServiceObservation } from "../../gen/skipper/v1/resource_pb.js";
import type { ProbeResult } from "../../gen/skipper/v1/order_action_pb.js";
import type { HealthProbe } from "../../gen/skipper/v1/safety_pb.js";
import { observeServices, readProjectContainers, type ProjectContainers } from "../engine/project-containers.js";
import { runProbes } from "../engine/probes.js";

const FIRST_POLL_MS = 50;
const MAX_POLL_MS = 500;

export interface HealthVerdict {
  observed: ServiceObservation[];
  containers: ProjectContainers;
  probes: ProbeResult[];
  /** Why the project is not healthy; undefined when it is. */
  failure?: string;
  cancelled?: boolean;
}

export async function awaitHealthy(
  projectName: string,
  services: string[],
  opts: { deadlineMs: number; probes: HealthProbe[]; signal?: AbortSignal; containers?: boolean },
): Promise<HealthVerdict> {
  const deadline = Date.now() + opts.deadlineMs;
  for (let wait = FIRST_POLL_MS; ; wait = Math.min(MAX_POLL_MS, wait * 2)) {
    // `containers: false`: a project of process modules alone, which has none (the engine is not asked).
    const containers = opts.containers === false ? { byService: new Map() } : await readProjectContainers(projectName);
    const observed = observeServices(services, containers);
    const notReady = observed.filter((s) => s.state !== "running");
    // Probes only once the containers run: a probe of a container still starting says nothing.
    const probes = notReady.length === 0 ? await runProbes(opts.probes, opts.signal) : [];
    const failing = probes.filter((p) => !p.ok);
    if (notReady.length === 0 && failing.length === 0) return { observed, containers, probes };
    if (opts.signal?.aborted) return { observed, containers, probes, failure: "cancelled", cancelled: true };
    if (Date.now() >= deadline) {
      const why = [...notReady.map((s) => `${s.service}: ${s.state}`), ...failing.map((p) => `${p.probe}: ${p.message}`)].join(", ");
      return { observed, containers, probes, failure: `not healthy after ${opts.deadlineMs} ms: ${why}` };
    }
    await new Promise((r) => setTimeout(r, wait));
  }
}
