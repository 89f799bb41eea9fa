// Renders the compose project one node runs for one tenant, as a pure function of resources.
// Two sources: a tenant that carries its own compose file uses it as it is (its service
// resources name compose services in it); otherwise the file is rendered from the tenant's
// service resources with their networks, volumes and resource limits. Rendering is
// deterministic: the same resources give the same bytes and the same spec hash, whatever order
// they arrive in, so unchanged desired state never looks like a change.
import { createHash } from "node:crypto";
import { clone, create } from "@bufbuild/protobuf";
import { isMap, parseDocument, stringify } from "yaml";
import { ComposeProjectSchema, type ComposeProject, type Resource, type ServiceSpec } from "../../gen/skipper/v1/resource_pb.js";
import type { SecretKeyRef, SecretUse } from "../../gen/skipper/v1/secret_pb.js";
import { ProcessSpecSchema, type ProcessSpec } from "../../gen/skipper/v1/process_pb.js";
import { ProxyRouteSchema, UpdateOrder, type ProxyRoute } from "../../gen/skipper/v1/proxy_pb.js";
import { registrySecrets, secretFileName, secretFilePath, secretUses, secretVariable } from "../resources/secret-refs.js";

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
  /** The tenant's live secrets, by id: their versions (never their values) go into the hash. */
  secrets?: ReadonlyMap<string, Resource>;
  /** artifact id -> the image its environment promoted ("repo@sha256:…"), for services that name one. */
  images?: ReadonlyMap<string, string>;
  /** The tenant's processes, resolved (delivery/resolve/tenant-processes.ts), sorted by module. */
  processes?: readonly ProcessSpec[];
}

export interface RenderedProject {
  project: ComposeProject;
  /** sha256 over project name, compose file and env: the fingerprint of the desired state. */
  specHash: string;
  /** Service ids in the project, sorted. */
  serviceIds: string[];
  /** service id -> compose service name. */
  composeServices: Record<string, string>;
  /** True when the compose file was rendered from the services (not the tenant's own): it defines exactly composeServices. */
  fromServices: boolean;
  /** Volume ids whose data is to be removed on this node, sorted (not part of the hash: a one-off). */
  deleteVolumes: string[];
  /** The secret values the project uses, at their versions now (part of the hash). */
  secretUses: SecretUse[];
  /** The tenant's registry credentials, by secret id (part of the hash through `secrets`). */
  registrySecretIds: string[];
  /** The tenant's processes, resolved (part of the hash when any). */
  processes: ProcessSpec[];
  /** The tenant's proxy routes (part of the hash when any). */
  routes: ProxyRoute[];
}

/** What a project's hash covers besides the project and its service mapping. */
export interface HashedSecrets {
  secretUses: SecretUse[];
  registrySecretIds: string[];
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
  const own = raw.trim() !== "";
  const rendered = own
    ? {
        composeFile: withArtifactImages(
          withSecretFiles(raw, Object.keys(spec?.compose?.secretFiles ?? {})),
          spec?.compose?.artifactImages ?? {},
          input.images,
        ),
        secretEnv: sortedRecord(spec?.compose?.secretEnv ?? {}),
        secretFiles: sortedRecord(spec?.compose?.secretFiles ?? {}),
      }
    : services.length === 0
      ? // Processes alone (a host without Docker): no compose file at all.
        { composeFile: "", secretEnv: {}, secretFiles: {} }
      : renderComposeFile(input.tenant.id, services, input);
  const env = own ? sortedRecord(spec?.compose?.env ?? {}) : {};
  const project = create(ComposeProjectSchema, { projectName, env, ...rendered });
  const deleteVolumes = [...new Set(input.deleteVolumes ?? [])].sort(cmp);
  const secrets = input.secrets ?? new Map<string, Resource>();
  const registries = registrySecrets(secrets);
  const hashed: HashedSecrets = {
    secretUses: secretUses([...Object.values(project.secretEnv), ...Object.values(project.secretFiles)], registries, secrets),
    registrySecretIds: registries.map((r) => r.id),
  };
  const processes = (input.processes ?? []).map((p) => clone(ProcessSpecSchema, p));
  const routes = (spec?.routes ?? []).map((r) => clone(ProxyRouteSchema, r));
  return {
    project,
    specHash: projectHash(project, composeServices, hashed, processes, routes),
    processes,
    routes,
    serviceIds: services.map((s) => s.id),
    composeServices,
    fromServices: !own,
    deleteVolumes,
    ...hashed,
  };
}

/**
 * sha256 of a project's canonical form: project name, file bytes, env and the service-resource
 * mapping (sorted by key), so adding a service resource to a tenant with its own compose file is
 * a change too (the next order reports that service's containers). A project that uses secrets
 * adds its references, the versions of their values and its registry credentials (a project
 * without any hashes as it did before secrets existed).
 */
export function projectHash(
  p: ComposeProject,
  composeServices: Record<string, string> = {},
  hashed?: HashedSecrets,
  processes: readonly ProcessSpec[] = [],
  routes: readonly ProxyRoute[] = [],
): string {
  const sorted = (r: Record<string, string>) => Object.entries(r).sort(([a], [b]) => cmp(a, b));
  const refs = (r: Record<string, SecretKeyRef>) =>
    Object.entries(r)
      .sort(([a], [b]) => cmp(a, b))
      .map(([name, ref]) => [name, ref.secretId, ref.key]);
  const parts: unknown[] = [p.projectName, p.composeFile, sorted(p.env), sorted(composeServices)];
  const uses = hashed?.secretUses ?? [];
  const registries = hashed?.registrySecretIds ?? [];
  if (Object.keys(p.secretEnv).length + Object.keys(p.secretFiles).length + uses.length + registries.length > 0) {
    parts.push(
      refs(p.secretEnv),
      refs(p.secretFiles),
      uses.map((u) => [u.secretId, u.key, u.version.toString()]),
      registries,
    );
  }
  // Processes, when any (a project without hashes as before they existed): what each runs.
  if (processes.length > 0) parts.push(processes.map(processParts));
  // Routes, when any (a hash from before them stays as it was).
  if (routes.length > 0)
    parts.push(
      "routes",
      routes.map((r) => [r.host, r.pathPrefix, r.service, r.port, r.drainSeconds]),
    );
  return createHash("sha256").update(JSON.stringify(parts), "utf8").digest("hex");
}

function processParts(p: ProcessSpec): unknown[] {
  const src = p.source?.kind;
  return [p.module, p.version, src?.case ?? "", src?.value ?? "", p.sha256.toLowerCase(), p.argv, sortedRecord(p.env)];
}

/**
 * A tenant's own compose file with each secret file it takes from secret resources declared at
 * the path the node writes it to (the declaration the file may make of its own is replaced).
 * The file is otherwise left as it is, comments too. Unchanged when it uses none.
 */
export function withSecretFiles(composeFile: string, names: string[]): string {
  if (names.length === 0) return composeFile;
  const doc = parseDocument(composeFile);
  if (doc.errors.length > 0 || !isMap(doc.contents)) return composeFile;
  // An empty `secrets:` (or one Compose would refuse anyway, a list) becomes the declarations.
  if (!isMap(doc.get("secrets", true))) doc.set("secrets", doc.createNode({}));
  for (const name of [...names].sort(cmp)) doc.setIn(["secrets", name], doc.createNode({ file: secretFilePath(name) }));
  return doc.toString({ lineWidth: 0 });
}

/**
 * A tenant's own compose file with the image of each service that names an artifact set to the
 * artifact's promoted image (services the file lacks, or artifacts unresolved, are left alone: the
 * caller blocks those before rendering). Unchanged when it names none.
 */
export function withArtifactImages(
  composeFile: string,
  artifactImages: Record<string, string>,
  images?: ReadonlyMap<string, string>,
): string {
  const names = Object.keys(artifactImages).sort(cmp);
  if (names.length === 0) return composeFile;
  const doc = parseDocument(composeFile);
  if (doc.errors.length > 0 || !isMap(doc.contents)) return composeFile;
  for (const name of names) {
    const image = images?.get(artifactImages[name]!);
    if (image && doc.hasIn(["services", name])) doc.setIn(["services", name, "image"], image);
  }
  return doc.toString({ lineWidth: 0 });
}

/** The compose service a service resource is: its compose_service, else its id. */
export function composeName(s: Resource): string {
  const v = s.desiredState?.kind.case === "service" ? s.desiredState.kind.value.composeService : "";
  return v !== "" ? v : s.id;
}

interface RenderedFile {
  composeFile: string;
  secretEnv: Record<string, SecretKeyRef>;
  secretFiles: Record<string, SecretKeyRef>;
}

function renderComposeFile(tenantId: string, services: Resource[], input: RenderInput): RenderedFile {
  const doc: Record<string, unknown> = {};
  const composeServices: Record<string, unknown> = {};
  const networks = new Set<string>();
  const volumes = new Set<string>();
  const placed = new Set(services.map((s) => s.id));
  const secretEnv: Record<string, SecretKeyRef> = {};
  const secretFiles: Record<string, SecretKeyRef> = {};
  for (const s of services) {
    if (s.desiredState?.kind.case !== "service") continue;
    const spec = s.desiredState.kind.value;
    spec.networkIds.forEach((n) => input.networks.has(n) && networks.add(n));
    spec.volumeIds.forEach((v) => input.volumes.has(v) && volumes.add(v));
    composeServices[composeName(s)] = renderService(tenantId, s.id, spec, input, placed);
    for (const ref of Object.values(spec.secretEnv)) secretEnv[secretVariable(ref)] = ref;
    for (const ref of Object.values(spec.secretFiles)) secretFiles[secretFileName(ref)] = ref;
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
  if (Object.keys(secretFiles).length > 0) {
    doc.secrets = Object.fromEntries(Object.keys(secretFiles).map((name) => [name, { file: secretFilePath(name) }]));
  }
  // Compose v1 reads YAML 1.1, where an unquoted yes, no, on or off is a boolean (and compose
  // refuses a boolean env value): YAML 1.1 output quotes every string that would read otherwise.
  return {
    composeFile: stringify(doc, { sortMapEntries: true, lineWidth: 0, version: "1.1" }),
    secretEnv: sortedRecord(secretEnv),
    secretFiles: sortedRecord(secretFiles),
  };
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
    image: spec.artifactId === "" ? spec.image : (input.images?.get(spec.artifactId) ?? ""),
    command: spec.command.length > 0 ? spec.command.map(escapeDollar) : undefined,
    environment: environmentOf(spec),
    secrets: secretMounts(spec),
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
    deploy: updateConfig(spec.updateOrder),
  });
}

// Compose's (and Swarm's) spelling of a service's update order; none when it declares none.
function updateConfig(order: UpdateOrder): Record<string, unknown> | undefined {
  if (order === UpdateOrder.START_FIRST) return { update_config: { order: "start-first" } };
  if (order === UpdateOrder.STOP_FIRST) return { update_config: { order: "stop-first" } };
  return undefined;
}

// Literal values, and ${VAR} of the project-wide variable for a value from a secret (a name in both
// is refused on write; the secret would win).
function environmentOf(spec: ServiceSpec): Record<string, string> | undefined {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(spec.env)) env[k] = escapeDollar(v);
  for (const [k, ref] of Object.entries(spec.secretEnv)) env[k] = `\${${secretVariable(ref)}}`;
  return Object.keys(env).length > 0 ? sortedRecord(env) : undefined;
}

// The service's secret files, each the project-wide compose secret mounted at /run/secrets/<name>.
function secretMounts(spec: ServiceSpec): { source: string; target: string }[] | undefined {
  const out = Object.entries(spec.secretFiles)
    .sort(([a], [b]) => cmp(a, b))
    .map(([target, ref]) => ({ source: secretFileName(ref), target }));
  return out.length > 0 ? out : undefined;
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

function sortedRecord<T>(r: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(r).sort(([a], [b]) => cmp(a, b)));
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
