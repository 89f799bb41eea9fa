// What a compose project may ask of its host (proto ComposePolicyLevel, after Kubernetes' Pod
// Security Standards). The controller checks a tenant's compose file when it is written, and the
// agent checks the project an order carries before it writes or runs anything: the same rules,
// here, on the parsed file (anchors and merge keys resolved as Compose resolves them).
//
// A value the rules must read cannot be checked when Compose would interpolate it (`${VAR}`):
// its final text is known only on the node, and may come from a secret. Such a value is refused
// under BASELINE and RESTRICTED; a literal says what it means.
import { posix } from "node:path";
import { parse } from "yaml";
import { ComposePolicyLevel } from "../gen/skipper/v1/resource_pb.js";

/** One thing a project asks for that its level does not allow. */
export interface ComposeViolation {
  /** Where in the compose file, e.g. services.web.privileged or services.web.volumes[0]. */
  path: string;
  /** Short machine-readable rule name, e.g. "privileged", "host-path". */
  rule: string;
  /** A sentence for people. */
  message: string;
}

export interface ComposeRules {
  level: ComposePolicyLevel;
  /** Absolute host directories bind mounts and files may come from. */
  allowedHostPaths: readonly string[];
}

// Docker's default capabilities that Pod Security's baseline also allows.
const BASELINE_CAPS = new Set([
  "AUDIT_WRITE",
  "CHOWN",
  "DAC_OVERRIDE",
  "FOWNER",
  "FSETID",
  "KILL",
  "MKNOD",
  "NET_BIND_SERVICE",
  "SETFCAP",
  "SETGID",
  "SETPCAP",
  "SETUID",
  "SYS_CHROOT",
]);
const RESTRICTED_CAPS = new Set(["NET_BIND_SERVICE"]);
// Namespaced sysctls Pod Security's baseline calls safe.
const SAFE_SYSCTLS = new Set([
  "kernel.shm_rmid_forced",
  "net.ipv4.ip_local_port_range",
  "net.ipv4.ip_unprivileged_port_start",
  "net.ipv4.tcp_syncookies",
  "net.ipv4.ping_group_range",
]);
const HOST_NAMESPACE_KEYS = ["pid", "ipc", "network_mode", "uts", "userns_mode", "cgroup"];
const DOCKER_SOCKETS = ["/var/run/docker.sock", "/run/docker.sock", "/var/run/docker", "/run/docker"];
const RESTRICTED_VOLUME_DRIVERS = new Set(["", "local"]);
const RESTRICTED_NETWORK_DRIVERS = new Set(["", "bridge", "overlay"]);

/** The level as a word for messages ("restricted"). */
export function levelName(level: ComposePolicyLevel): string {
  return (ComposePolicyLevel[level] ?? "UNSPECIFIED").toLowerCase();
}

/**
 * What `composeFile` asks for beyond `rules` (none under PRIVILEGED or UNSPECIFIED). A file that
 * does not parse has no violations here: whether it parses is checked on its own.
 */
export function composeViolations(composeFile: string, rules: ComposeRules): ComposeViolation[] {
  if (rules.level !== ComposePolicyLevel.BASELINE && rules.level !== ComposePolicyLevel.RESTRICTED) return [];
  let doc: unknown;
  try {
    doc = parse(composeFile, { merge: true, maxAliasCount: 1000 });
  } catch {
    return [];
  }
  if (!isMap(doc)) return [];
  const out: ComposeViolation[] = [];
  const check = new Checker(rules, out);
  for (const key of ["include", "extends"]) {
    if (doc[key] !== undefined) check.hostFiles(key, doc[key]);
  }
  const services = isMap(doc.services) ? doc.services : {};
  for (const [name, svc] of Object.entries(services)) if (isMap(svc)) check.service(`services.${name}`, svc);
  for (const kind of ["secrets", "configs"]) {
    const defs = isMap(doc[kind]) ? doc[kind] : {};
    for (const [name, def] of Object.entries(defs)) {
      if (isMap(def) && def.file !== undefined) check.hostPath(`${kind}.${name}.file`, def.file, "a file");
    }
  }
  const volumes = isMap(doc.volumes) ? doc.volumes : {};
  for (const [name, def] of Object.entries(volumes)) if (isMap(def)) check.volumeDefinition(`volumes.${name}`, def);
  const networks = isMap(doc.networks) ? doc.networks : {};
  for (const [name, def] of Object.entries(networks)) {
    if (isMap(def) && rules.level === ComposePolicyLevel.RESTRICTED) {
      check.driver(`networks.${name}.driver`, def.driver, RESTRICTED_NETWORK_DRIVERS, "network");
    }
  }
  return out;
}

class Checker {
  constructor(
    private readonly rules: ComposeRules,
    private readonly out: ComposeViolation[],
  ) {}

  private add(path: string, rule: string, message: string): void {
    this.out.push({ path, rule, message: `${path}: ${message} (not allowed at level ${levelName(this.rules.level)})` });
  }

  // A value the rules must read: refused when Compose would interpolate it.
  private literal(path: string, value: unknown): string | undefined {
    const text = typeof value === "string" ? value : typeof value === "number" || typeof value === "boolean" ? String(value) : undefined;
    if (text?.includes("$")) {
      this.add(path, "interpolated", "a value the policy checks cannot come from a variable; write it out");
      return undefined;
    }
    return text;
  }

  service(path: string, svc: Record<string, unknown>): void {
    if (svc.privileged !== undefined) {
      const v = this.literal(`${path}.privileged`, svc.privileged);
      if (v !== undefined && v !== "false") this.add(`${path}.privileged`, "privileged", "a privileged container is root on the host");
    }
    for (const key of HOST_NAMESPACE_KEYS) {
      if (svc[key] === undefined) continue;
      const v = this.literal(`${path}.${key}`, svc[key]);
      if (v === undefined) continue;
      if (v === "host") this.add(`${path}.${key}`, "host-namespace", `${key}: host shares the host's namespace`);
      else if (v.startsWith("container:")) this.add(`${path}.${key}`, "container-namespace", `${key} joins another container's namespace`);
    }
    for (const [i, from] of list(svc.volumes_from).entries()) {
      const v = this.literal(`${path}.volumes_from[${i}]`, from);
      if (v?.startsWith("container:")) this.add(`${path}.volumes_from[${i}]`, "container-volumes", "mounts another container's volumes");
    }
    if (svc.devices !== undefined && list(svc.devices).length > 0) this.add(`${path}.devices`, "devices", "host devices");
    if (svc.device_cgroup_rules !== undefined && list(svc.device_cgroup_rules).length > 0) {
      this.add(`${path}.device_cgroup_rules`, "devices", "access to host devices");
    }
    if (svc.gpus !== undefined) this.add(`${path}.gpus`, "devices", "host devices (GPUs)");
    const caps = this.rules.level === ComposePolicyLevel.RESTRICTED ? RESTRICTED_CAPS : BASELINE_CAPS;
    for (const [i, cap] of list(svc.cap_add).entries()) {
      const v = this.literal(`${path}.cap_add[${i}]`, cap);
      const name = v?.toUpperCase().replace(/^CAP_/, "");
      if (name !== undefined && !caps.has(name)) this.add(`${path}.cap_add[${i}]`, "capability", `capability ${name}`);
    }
    for (const [i, opt] of list(svc.security_opt).entries()) {
      const v = this.literal(`${path}.security_opt[${i}]`, opt);
      if (v !== undefined && /^(seccomp|apparmor)[=:]unconfined$|^label[=:]disable$|^systempaths[=:]unconfined$/i.test(v.trim())) {
        this.add(`${path}.security_opt[${i}]`, "unconfined", `security_opt ${v} turns a protection off`);
      }
    }
    const sysctls = isMap(svc.sysctls)
      ? Object.keys(svc.sysctls)
      : list(svc.sysctls).map((s) => (typeof s === "string" ? s.split("=")[0]!.trim() : String(s)));
    for (const name of sysctls) {
      if (!SAFE_SYSCTLS.has(name)) this.add(`${path}.sysctls.${name}`, "sysctl", `sysctl ${name}`);
    }
    for (const [i, vol] of list(svc.volumes).entries()) this.mount(`${path}.volumes[${i}]`, vol);
    for (const [i, file] of list(svc.env_file).entries()) {
      this.hostPath(`${path}.env_file[${i}]`, isMap(file) ? file.path : file, "an env file");
    }
    if (svc.build !== undefined) {
      const context = typeof svc.build === "string" ? svc.build : isMap(svc.build) ? (svc.build.context ?? ".") : ".";
      this.hostPath(`${path}.build`, context, "a build context");
    }
    if (svc.extends !== undefined) this.hostFiles(`${path}.extends`, svc.extends);
  }

  // One entry of a service's volumes: short "SRC:DST[:MODE]" or long {type, source, target}.
  private mount(path: string, vol: unknown): void {
    if (isMap(vol)) {
      const type = this.literal(`${path}.type`, vol.type ?? "volume");
      if (type === "bind") this.hostPath(`${path}.source`, vol.source, "a bind mount");
      else if (type === "npipe") this.add(`${path}.type`, "host-path", "a named pipe of the host");
      else if (type === "volume" || type === "tmpfs" || type === "image" || type === "cluster") this.literal(`${path}.source`, vol.source);
      return;
    }
    const text = this.literal(path, vol);
    if (text === undefined) return;
    const parts = text.split(":");
    if (parts.length < 2) return; // an anonymous volume
    const source = parts[0]!;
    // A host path starts with /, . or ~; anything else names a volume.
    if (/^[/.~]/.test(source)) this.hostPath(path, source, "a bind mount");
  }

  /** A host path (absolute, or relative to the project directory): inside the project, or under an allowed path. */
  hostPath(path: string, value: unknown, what: string): void {
    const text = this.literal(path, value);
    if (text === undefined) return;
    if (text.startsWith("~")) {
      this.add(path, "host-path", `${what} from a home directory of the host`);
      return;
    }
    if (!posix.isAbsolute(text)) {
      const inside = posix.normalize(text);
      if (inside === ".." || inside.startsWith("../")) this.add(path, "host-path", `${what} from outside the project directory (${text})`);
      return;
    }
    const abs = posix.normalize(text);
    if (DOCKER_SOCKETS.some((s) => abs === s || abs.startsWith(`${s}/`)) || abs === "/" || abs === "/var/run" || abs === "/run") {
      this.add(path, "docker-socket", `${what} of ${abs} reaches the Docker engine, which is root on the host`);
      return;
    }
    const allowed = this.rules.allowedHostPaths.some((p) => {
      const root = posix.normalize(p);
      return abs === root || abs.startsWith(root.endsWith("/") ? root : `${root}/`);
    });
    if (!allowed) this.add(path, "host-path", `${what} from ${abs}, outside the allowed host paths`);
  }

  // include / extends: files of the host read into the project.
  hostFiles(path: string, value: unknown): void {
    const items = Array.isArray(value) ? value : [value];
    for (const [i, item] of items.entries()) {
      const at = Array.isArray(value) ? `${path}[${i}]` : path;
      if (typeof item === "string") this.hostPath(at, item, "a file");
      else if (isMap(item)) {
        for (const key of ["file", "path", "env_file", "project_directory"]) {
          for (const [j, f] of list(item[key]).entries())
            this.hostPath(`${at}.${key}${Array.isArray(item[key]) ? `[${j}]` : ""}`, f, "a file");
        }
      }
    }
  }

  volumeDefinition(path: string, def: Record<string, unknown>): void {
    if (this.rules.level === ComposePolicyLevel.RESTRICTED) this.driver(`${path}.driver`, def.driver, RESTRICTED_VOLUME_DRIVERS, "volume");
    const opts = isMap(def.driver_opts) ? def.driver_opts : {};
    if (opts.device !== undefined) {
      const type = String(opts.type ?? "");
      const device = this.literal(`${path}.driver_opts.device`, opts.device);
      // A local volume with type none and a device is a bind mount of that host path.
      if (device !== undefined && (type === "none" || String(opts.o ?? "").includes("bind"))) {
        this.hostPath(`${path}.driver_opts.device`, device, "a volume's device");
      } else if (device !== undefined) this.add(`${path}.driver_opts.device`, "devices", `a volume on device ${device}`);
    }
  }

  driver(path: string, value: unknown, allowed: Set<string>, what: string): void {
    const v = this.literal(path, value ?? "");
    if (v !== undefined && !allowed.has(v)) this.add(path, "driver", `${what} driver ${v}`);
  }
}

function isMap(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function list(v: unknown): unknown[] {
  if (v === undefined || v === null) return [];
  return Array.isArray(v) ? v : [v];
}
