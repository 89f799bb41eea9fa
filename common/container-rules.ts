// The rules of a deploy_container order's spec and of a control_container order, shared by the
// controller (INVALID_REQUEST naming the field, nothing queued) and the agent (CONTAINER_INVALID:
// it checks again, being the authority over its host). Pure: a problem naming its field, or
// undefined when the value may run.
import { ENV_KEY } from "./action-rules.js";
import { parseImageReference } from "./image-reference.js";

/** A container name the executor manages: lowercase, so `<name>-previous` is a name too. */
export const CONTAINER_NAME = /^[a-z0-9][a-z0-9_.-]{0,47}$/;
/** Suffixes of the names the executor gives the containers it keeps aside. */
export const PREVIOUS_SUFFIX = "-previous";
export const REPLACED_SUFFIX = "-replaced";
/** A sha256 digest as the engine writes one (repo digest or image id). */
export const SHA256_DIGEST = /^sha256:[0-9a-f]{64}$/;
/** A named volume (Docker's rule for volume names). */
export const VOLUME_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/;
/** A directory under the container's own directory of the agent: ./a/b, no '..', nothing Docker's --mount syntax reads. */
const AGENT_DIR = /^\.\/[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/;
const RESTART_POLICY = /^(no|always|unless-stopped|on-failure(:[0-9]{1,3})?)$/;
/** Label names skippy writes itself. */
export const SKIPPER_LABEL_PREFIX = "skipper.";
const LIMITS = { args: 64, argBytes: 4096, env: 128, valueBytes: 32 * 1024, ports: 32, mounts: 32, labels: 64, healthBytes: 4096 } as const;

/** A container spec as the rules read it (the contract's ContainerSpec has these fields). */
export interface ContainerRequest {
  name: string;
  image: string;
  digest: string;
  args: readonly string[];
  env: Readonly<Record<string, string>>;
  ports: readonly { hostPort: number; containerPort: number; protocol: string; hostIp: string }[];
  mounts: readonly { source: string; target: string; readOnly: boolean }[];
  labels: Readonly<Record<string, string>>;
  restartPolicy: string;
  healthCommand: string;
  stopTimeoutSeconds: number;
}

export type FieldProblem = { field: string; problem: string };

/** What is wrong with a container name, or undefined. */
export function containerNameProblem(name: string): string | undefined {
  if (!CONTAINER_NAME.test(name)) return "must be 1-48 of a-z 0-9 _ . - starting with a letter or digit";
  if (name.endsWith(PREVIOUS_SUFFIX) || name.endsWith(REPLACED_SUFFIX))
    return `must not end in ${PREVIOUS_SUFFIX} or ${REPLACED_SUFFIX} (the executor's names for the containers it keeps aside)`;
  return undefined;
}

/**
 * The first problem with a container spec, its field named under `at` (e.g.
 * "action.deploy_container.spec"), or undefined when it may run.
 */
export function containerSpecProblem(s: ContainerRequest, at: string): FieldProblem | undefined {
  const bad = (field: string, problem: string) => ({ field: `${at}.${field}`, problem });
  const name = containerNameProblem(s.name);
  if (name) return bad("name", name);
  const ref = parseImageReference(s.image);
  if (!ref.ok) return bad("image", ref.problem);
  if (s.digest !== "" && !SHA256_DIGEST.test(s.digest)) return bad("digest", "must be sha256: and 64 lowercase hex digits");
  if (s.digest !== "" && ref.reference.digest !== "" && ref.reference.digest !== s.digest)
    return bad("digest", `differs from the image reference's own digest ${ref.reference.digest}`);
  if (s.args.length > LIMITS.args) return bad("args", `must hold at most ${LIMITS.args} entries`);
  for (const [i, a] of s.args.entries())
    if (a.includes("\0") || Buffer.byteLength(a) > LIMITS.argBytes)
      return bad(`args[${i}]`, `must be at most ${LIMITS.argBytes} bytes without NUL`);
  const env = Object.entries(s.env);
  if (env.length > LIMITS.env) return bad("env", `must hold at most ${LIMITS.env} variables`);
  for (const [k, v] of env) {
    if (!ENV_KEY.test(k)) return bad("env", `key ${JSON.stringify(k.slice(0, 64))} is not a valid variable name`);
    // The engine reads the values from an env file: one line each.
    if (/[\0\r\n]/.test(v) || Buffer.byteLength(v) > LIMITS.valueBytes)
      return bad(`env.${k}`, `must be at most ${LIMITS.valueBytes} bytes on one line, without NUL`);
  }
  return portsProblem(s, bad) ?? mountsProblem(s, bad) ?? restProblem(s, bad);
}

type Bad = (field: string, problem: string) => FieldProblem;

function portsProblem(s: ContainerRequest, bad: Bad): FieldProblem | undefined {
  if (s.ports.length > LIMITS.ports) return bad("ports", `must hold at most ${LIMITS.ports} ports`);
  for (const [i, p] of s.ports.entries()) {
    if (p.containerPort < 1 || p.containerPort > 65535) return bad(`ports[${i}].container_port`, "must be 1-65535");
    if (p.hostPort > 65535) return bad(`ports[${i}].host_port`, "must be 0-65535 (0: the engine picks one)");
    if (!["", "tcp", "udp"].includes(p.protocol)) return bad(`ports[${i}].protocol`, "must be tcp or udp");
    if (p.hostIp !== "" && !/^([0-9]{1,3}(\.[0-9]{1,3}){3}|\[?[0-9a-fA-F:]+\]?)$/.test(p.hostIp))
      return bad(`ports[${i}].host_ip`, "must be an IPv4 or IPv6 address");
  }
  return undefined;
}

function mountsProblem(s: ContainerRequest, bad: Bad): FieldProblem | undefined {
  if (s.mounts.length > LIMITS.mounts) return bad("mounts", `must hold at most ${LIMITS.mounts} mounts`);
  const targets = new Set<string>();
  for (const [i, m] of s.mounts.entries()) {
    if (!VOLUME_NAME.test(m.source) && !(AGENT_DIR.test(m.source) && !m.source.split("/").includes("..")))
      return bad(`mounts[${i}].source`, "must be a volume name or ./relative/path under the agent's directory for this container");
    if (!/^\/[A-Za-z0-9_.@/-]*$/.test(m.target) || m.target.split("/").includes("..") || m.target.length > 1024)
      return bad(`mounts[${i}].target`, "must be an absolute path in the container (letters, digits, _ . @ - /, no '..')");
    if (targets.has(m.target)) return bad(`mounts[${i}].target`, "is mounted twice");
    targets.add(m.target);
  }
  return undefined;
}

function restProblem(s: ContainerRequest, bad: Bad): FieldProblem | undefined {
  const labels = Object.entries(s.labels);
  if (labels.length > LIMITS.labels) return bad("labels", `must hold at most ${LIMITS.labels} labels`);
  for (const [k, v] of labels) {
    if (!/^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$/.test(k)) return bad("labels", `name ${JSON.stringify(k.slice(0, 64))} is not a label name`);
    if (k.startsWith(SKIPPER_LABEL_PREFIX)) return bad(`labels.${k}`, `is reserved: ${SKIPPER_LABEL_PREFIX}* labels are the executor's`);
    if (v.includes("\0") || v.length > 4096) return bad(`labels.${k}`, "must be at most 4096 characters without NUL");
  }
  if (s.restartPolicy !== "" && !RESTART_POLICY.test(s.restartPolicy))
    return bad("restart_policy", "must be no, always, unless-stopped, on-failure or on-failure:N");
  if (/[\0\r\n]/.test(s.healthCommand) || Buffer.byteLength(s.healthCommand) > LIMITS.healthBytes)
    return bad("health_command", `must be at most ${LIMITS.healthBytes} bytes on one line`);
  if (s.stopTimeoutSeconds > 600) return bad("stop_timeout_seconds", "must be at most 600");
  return undefined;
}
