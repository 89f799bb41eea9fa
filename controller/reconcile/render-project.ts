// Renders the compose project one node runs for one tenant, as a pure function of resources.
// Two sources: a tenant that carries its own compose file uses it as it is (its service
// resources name compose services in it); otherwise the file is rendered from the tenant's
// service resources with their networks, volumes and resource limits. Rendering is
// deterministic: the same resources give the same bytes and the same spec hash, whatever order
// they arrive in, so unchanged desired state never looks like a change.
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { stringify } from "yaml";
import { ComposeProjectSchema, type ComposeProject, type Resource, type ServiceSpec } from "../../gen/skipper/v1/resource_pb.js";

/** The resources a project is rendered from. Maps are by id and hold live resources only. */
export interface RenderInput {
  tenant: Resource;
  /** The tenant's services placed on this node. */
  services: Resource[];
  networks: Map<string, Resource>;
  volumes: Map<string, Resource>;
  limits: Map<string, Resource>;
  /** Volume ids whose data is to be removed on this node (volumesToDelete). */
  deleteVolumes?: string[];
}

export interface RenderedProject {
  project: ComposeProject;
  /** sha256 over project name, compose file and env: the fingerprint of the desired state. */
  specHash: string;
  /** Service ids in the project, sorted. */
  serviceIds: string[];
  /** service id -> compose service name. */
  composeServices: Record<string, string>;
  /** Volume ids whose data is to be removed on this node, sorted (not part of the hash: a one-off). */
  deleteVolumes: string[];
}

/** Labels the rendered containers carry, so the engine can say which resource a container is. */
export const SERVICE_ID_LABEL = "dev.skipper.service-id";
export const TENANT_ID_LABEL = "dev.skipper.tenant-id";

/** Renders the project; the tenant's own compose file wins when it has one. */
export function renderProject(input: RenderInput): RenderedProject {
  const spec = input.tenant.desiredState?.kind.case === "tenant" ? input.tenant.desiredState.kind.value : undefined;
  const services = [...input.services].sort((a, b) => cmp(a.id, b.id));
  const composeServices = Object.fromEntries(services.map((s) => [s.id, composeName(s)]));
  const projectName = spec?.compose?.projectName || input.tenant.id;
  const raw = spec?.compose?.composeFile ?? "";
  const composeFile = raw.trim() !== "" ? raw : renderComposeFile(input.tenant.id, services, input);
  const env = raw.trim() !== "" ? sortedRecord(spec?.compose?.env ?? {}) : {};
  const project = create(ComposeProjectSchema, { projectName, composeFile, env });
  const deleteVolumes = [...new Set(input.deleteVolumes ?? [])].sort(cmp);
  return {
    project,
    specHash: projectHash(project, composeServices),
    serviceIds: services.map((s) => s.id),
    composeServices,
    deleteVolumes,
  };
}

/**
 * sha256 of a project's canonical form: project name, file bytes, env and the service-resource
 * mapping (sorted by key), so adding a service resource to a tenant with its own compose file is
 * a change too (the next order reports that service's containers).
 */
export function projectHash(p: ComposeProject, composeServices: Record<string, string> = {}): string {
  const sorted = (r: Record<string, string>) => Object.entries(r).sort(([a], [b]) => cmp(a, b));
  const canonical = JSON.stringify([p.projectName, p.composeFile, sorted(p.env), sorted(composeServices)]);
  return createHash("sha256").update(canonical, "utf8").digest("hex");
}

/** The compose service a service resource is: its compose_service, else its id. */
export function composeName(s: Resource): string {
  const v = s.desiredState?.kind.case === "service" ? s.desiredState.kind.value.composeService : "";
  return v !== "" ? v : s.id;
}

function renderComposeFile(tenantId: string, services: Resource[], input: RenderInput): string {
  const doc: Record<string, unknown> = {};
  const composeServices: Record<string, unknown> = {};
  const networks = new Set<string>();
  const volumes = new Set<string>();
  const placed = new Set(services.map((s) => s.id));
  for (const s of services) {
    if (s.desiredState?.kind.case !== "service") continue;
    const spec = s.desiredState.kind.value;
    spec.networkIds.forEach((n) => input.networks.has(n) && networks.add(n));
    spec.volumeIds.forEach((v) => input.volumes.has(v) && volumes.add(v));
    composeServices[composeName(s)] = renderService(tenantId, s.id, spec, input, placed);
  }
  doc.services = composeServices;
  if (networks.size > 0) {
    doc.networks = Object.fromEntries(
      [...networks].sort(cmp).map((id) => {
        const n = input.networks.get(id)!.desiredState!.kind;
        const v = n.case === "network" ? n.value : undefined;
        return [id, prune({ driver: v?.driver || undefined, internal: v?.internal || undefined })];
      }),
    );
  }
  if (volumes.size > 0) {
    doc.volumes = Object.fromEntries(
      [...volumes].sort(cmp).map((id) => {
        const k = input.volumes.get(id)!.desiredState!.kind;
        return [id, prune({ driver: k.case === "volume" ? k.value.driver || undefined : undefined })];
      }),
    );
  }
  // Compose v1 reads YAML 1.1, where an unquoted yes, no, on or off is a boolean (and compose
  // refuses a boolean env value): YAML 1.1 output quotes every string that would read otherwise.
  return stringify(doc, { sortMapEntries: true, lineWidth: 0, version: "1.1" });
}

function renderService(tenantId: string, id: string, spec: ServiceSpec, input: RenderInput, placed: Set<string>): Record<string, unknown> {
  const limits = input.limits.get(spec.resourceLimitsId)?.desiredState?.kind;
  const l = limits?.case === "resourceLimits" ? limits.value : undefined;
  const byId = new Map(input.services.map((s) => [s.id, s]));
  const volumeMounts = spec.volumeIds
    .filter((v) => input.volumes.has(v))
    .map((v) => {
      const k = input.volumes.get(v)!.desiredState!.kind;
      const mount = k.case === "volume" && k.value.mountPath !== "" ? k.value.mountPath : `/data/${v}`;
      return `${v}:${mount}`;
    });
  return prune({
    image: spec.image,
    command: spec.command.length > 0 ? spec.command.map(escapeDollar) : undefined,
    environment:
      Object.keys(spec.env).length > 0
        ? Object.fromEntries(
            Object.entries(spec.env)
              .sort(([a], [b]) => cmp(a, b))
              .map(([k, v]) => [k, escapeDollar(v)]),
          )
        : undefined,
    ports:
      spec.ports.length > 0
        ? spec.ports.map((p) => `${p.hostIp ? `${p.hostIp}:` : ""}${p.hostPort}:${p.containerPort}/${p.protocol || "tcp"}`)
        : undefined,
    networks: spec.networkIds.some((n) => input.networks.has(n))
      ? spec.networkIds.filter((n) => input.networks.has(n)).sort(cmp)
      : undefined,
    volumes: volumeMounts.length > 0 ? volumeMounts.sort(cmp) : undefined,
    depends_on: dependsOn(spec, placed, byId),
    cpus: l && l.cpus > 0 ? l.cpus : undefined,
    mem_limit: l && l.memoryBytes > 0n ? Number(l.memoryBytes) : undefined,
    pids_limit: l && l.pids > 0n ? Number(l.pids) : undefined,
    restart: "unless-stopped",
    labels: { [SERVICE_ID_LABEL]: id, [TENANT_ID_LABEL]: tenantId },
  });
}

// Only dependencies placed on the same node can be started first; others are outside the project.
function dependsOn(spec: ServiceSpec, placed: Set<string>, byId: Map<string, Resource>): string[] | undefined {
  const names = spec.dependsOn
    .filter((d) => placed.has(d))
    .map((d) => composeName(byId.get(d)!))
    .sort(cmp);
  return names.length > 0 ? names : undefined;
}

// Compose interpolates ${VAR} in the file; a literal value must keep its dollars.
function escapeDollar(v: string): string {
  // (a function, because "$$" in a replacement string means one "$")
  return v.replaceAll("$", () => "$$");
}

function prune(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== ""));
}

function sortedRecord(r: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(r).sort(([a], [b]) => cmp(a, b)));
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
