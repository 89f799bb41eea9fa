// Orders that look without touching:
//   health_check  runs the order's probes from this host and, when it names a tenant, checks that
//                 tenant's project (every service running, healthy where a healthcheck is
//                 defined)                                  -> HEALTHY, UNHEALTHY, DOCKER_UNAVAILABLE
//   inspect       engine facts: version and Compose, the projects this agent manages (or the
//                 tenant's) with their containers, and the images they run with their digests
//                                                          -> INSPECT_OK, DOCKER_UNAVAILABLE
import type { ServiceObservation } from "../../gen/skipper/v1/resource_pb.js";
import { ComposeVariant } from "../../gen/skipper/v1/resource_pb.js";
import { EngineError } from "../engine/project-containers.js";
import { observeProjects } from "../engine/project-state.js";
import { projectImages } from "../engine/images.js";
import type { ImageObservation } from "../../gen/skipper/v1/order_action_pb.js";
import { runProbes } from "../engine/probes.js";
import { executorOf, orderOutcome } from "./executor.js";

/** Runs the order's probes from this host and checks the named tenant's project, if any. */
export const healthCheck = executorOf("healthCheck", async (action, order, ctx) => {
  const started = performance.now();
  const tenantId = order.target?.tenantId ?? "";
  const probes = action?.probes ?? [];
  let services: ServiceObservation[] = [];
  if (tenantId !== "") {
    try {
      const [project] = await observeProjects(ctx.config.workDir, tenantId);
      if (!project) return orderOutcome("UNHEALTHY", `tenant ${tenantId} has no project applied on this node`, started, { success: false });
      services = project.services;
    } catch (e) {
      if (e instanceof EngineError) return orderOutcome("DOCKER_UNAVAILABLE", e.message, started, { success: false, retriable: true });
      throw e;
    }
  }
  const results = await runProbes(probes, ctx.signal);
  const problems = [
    ...services.filter((s) => s.state !== "running").map((s) => `${s.service}: ${s.state}`),
    ...results.filter((r) => !r.ok).map((r) => `${r.probe}: ${r.message}`),
  ];
  const ok = problems.length === 0;
  const what = `${results.length} probe(s)${tenantId ? `, ${services.length} service(s) of ${tenantId}` : ""}`;
  return orderOutcome(ok ? "HEALTHY" : "UNHEALTHY", ok ? `${what} healthy` : `unhealthy: ${problems.join(", ")}`, started, {
    success: ok,
    services,
    details: { probes: results, services },
  });
});

/** Reports engine facts, the managed projects (or the tenant's) and the images they run. */
export const inspect = executorOf("inspect", async (_action, order, ctx) => {
  const started = performance.now();
  const tenantId = order.target?.tenantId ?? "";
  const caps = ctx.host.capabilities;
  if (!caps.dockerAvailable)
    return orderOutcome("DOCKER_UNAVAILABLE", caps.message || "no Docker engine answers", started, { success: false, retriable: true });
  try {
    const projects = await observeProjects(ctx.config.workDir, tenantId || undefined);
    const images = new Map<string, ImageObservation>();
    for (const p of projects) for (const s of await projectImages(p.projectName)) images.set(s.image.id, s.image);
    const compose = ComposeVariant[caps.composeVariant] ?? "";
    return orderOutcome(
      "INSPECT_OK",
      `docker ${caps.dockerVersion}, compose ${compose.toLowerCase()} ${caps.composeVersion}; ${projects.length} project(s), ${images.size} image(s)`,
      started,
      {
        success: true,
        services: projects.find((p) => p.tenantId === tenantId)?.services ?? [],
        details: {
          projects,
          images: [...images.values()],
          extra: {
            docker_version: caps.dockerVersion,
            compose_variant: compose,
            compose_version: caps.composeVersion,
            os: caps.os,
            arch: caps.arch,
            hostname: caps.hostname,
          },
        },
      },
    );
  } catch (e) {
    if (e instanceof EngineError) return orderOutcome("DOCKER_UNAVAILABLE", e.message, started, { success: false, retriable: true });
    throw e;
  }
});
