// Rules for the payloads of ad-hoc work orders, shared by the controller (which refuses a bad
// request before anything is stored) and the agent (which checks again: it trusts no one with
// its host). Pure functions returning a problem description, or undefined when the value is fine.
import { posix } from "node:path";

export const MODULE_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const MODULE_VERSION = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$/;
export const SHA256_HEX = /^[0-9a-fA-F]{64}$/;
/** Compose service names. */
export const COMPOSE_SERVICE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/;
/** A command's argv[0] (and an allow-list entry): a bare program name or an absolute path, no shell syntax or spaces. */
export const PROGRAM = /^(\/[A-Za-z0-9._+/-]+|[A-Za-z0-9._+-]+)$/;
export const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** A file a node writes from a secret value (a compose secret's name; no path, no leading dot). */
export const SECRET_FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
/**
 * Secret variables go to Compose in its environment: names that would steer Compose or the Docker
 * CLI themselves (or what they load) are refused.
 */
export const COMPOSE_STEERING_ENV =
  /^(PATH|HOME|TMPDIR|IFS|NODE_OPTIONS|LD_.*|DYLD_.*|DOCKER_.*|COMPOSE_.*|PYTHON.*|BUILDKIT_.*|BUILDX_.*|XDG_.*|GIT_.*|SSH_.*|SSL_CERT_.*|OTEL_.*|SKIPPY_.*|(HTTPS?|ALL|NO)_PROXY|(https?|all|no)_proxy)$/;
/** A value's name within a secret resource. */
export const SECRET_VALUE_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,127}$/;
/** A registry host, as image references name it: host or host:port, lowercase. */
export const REGISTRY_HOST = /^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)*(:[0-9]{1,5})?$/;

/** Names in a tenant's project directory that belong to the agent, not to uploads. */
const RESERVED = new Set(["docker-compose.yml", ".env"]);

/**
 * Problem with an upload path: relative, normalised, inside its base and, in a tenant's project
 * directory, not one of the agent's own files (agent/executors/upload-files.ts applies the same rules).
 */
export function uploadPathProblem(path: string, inProjectDir: boolean): string | undefined {
  if (path === "" || path.length > 4096) return "must be 1-4096 characters";
  if (path.includes("\0") || path.includes("\\")) return "must not contain NUL or backslashes";
  if (path.startsWith("/")) return "must be relative";
  const parts = path.split("/");
  if (parts.some((p) => p === "" || p === "." || p === "..")) return "must be normalised: no empty, '.' or '..' segments";
  if (posix.normalize(path) !== path) return "must be normalised";
  const first = parts[0]!;
  if (inProjectDir && RESERVED.has(first)) return `'${first}' is managed by the agent`;
  if (inProjectDir && (first.startsWith(".skipper-") || first.startsWith(".staging-"))) return `'${first}' is managed by the agent`;
  return undefined;
}

/** Problem with an http(s) URL used by a probe or a download. */
export function urlProblem(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return "is not a URL";
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") return "must be http:// or https://";
  if (u.username !== "" || u.password !== "") return "must not carry credentials";
  return undefined;
}

/** Problem with a TCP probe's host (a name or an address, no ports or paths). */
export function hostProblem(host: string): string | undefined {
  return /^[A-Za-z0-9.:_-]{1,253}$/.test(host) ? undefined : "must be a host name or IP address";
}

/**
 * True when a deploy_process source is under one of the node's allowed sources: an http(s) URL
 * prefix, or an absolute directory the path lies in. deploy_process runs what it installs, so a
 * node takes artifacts only from where its operator said (the agent's --allow-process-source).
 */
export function processSourceAllowed(
  source: { case: "path" | "url"; value: string } | { case: undefined },
  allowed: readonly string[],
): boolean {
  if (source.case === undefined) return false;
  if (source.case === "url") return allowed.some((a) => urlUnder(source.value, a));
  if (!source.value.startsWith("/") || posix.normalize(source.value) !== source.value) return false;
  return allowed.some((a) => a.startsWith("/") && source.value.startsWith(a.endsWith("/") ? a : `${a}/`));
}

/** Checks one --allow-process-source entry: an http(s) URL prefix or an absolute, normalised directory. */
export function validProcessSourceEntry(entry: string): boolean {
  if (/^https?:\/\//.test(entry)) return urlProblem(entry) === undefined;
  return entry.startsWith("/") && entry.length > 1 && posix.normalize(entry) === entry && !entry.includes("\0");
}

// A URL source is under an allowed URL when, both parsed, they have the same origin (scheme,
// host and port: "https://artifacts.example.com" does not admit
// "https://artifacts.example.com.evil.net/...") and the source's normalised path lies within the
// allowed path as a directory ("/skipper" admits "/skipper/app.tgz", not "/skipper-evil/...").
// A source carrying credentials is refused.
function urlUnder(source: string, allowedEntry: string): boolean {
  if (!/^https?:\/\//.test(allowedEntry)) return false;
  let src: URL;
  let allowed: URL;
  try {
    src = new URL(source);
    allowed = new URL(allowedEntry);
  } catch {
    return false;
  }
  if (src.username !== "" || src.password !== "" || src.origin !== allowed.origin) return false;
  const base = allowed.pathname.endsWith("/") ? allowed.pathname : `${allowed.pathname}/`;
  return src.pathname.startsWith(base) && src.pathname.length > base.length;
}

/** exec_service's limits: argv entries, bytes per entry (and per env value), env entries, stdin bytes. */
export const EXEC_LIMITS = { argv: 64, argBytes: 4096, env: 64, stdinBytes: 64 * 1024 } as const;
/** A user inside a container as `docker exec --user` takes it: a name or uid, optionally :group or :gid. */
export const CONTAINER_USER = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$/;

/** An exec_service action as the rules read it (the contract's ExecServiceAction has these fields). */
export interface ExecRequest {
  service: string;
  argv: readonly string[];
  user: string;
  workdir: string;
  env: Readonly<Record<string, string>>;
  stdin: Uint8Array;
}

/**
 * The first problem with an exec_service action, naming its field under action.exec_service, or
 * undefined when it may run (the controller refuses it before storing; the agent checks again).
 */
export function execActionProblem(a: ExecRequest): { field: string; problem: string } | undefined {
  const at = (field: string, problem: string) => ({ field: `action.exec_service.${field}`, problem });
  if (!COMPOSE_SERVICE.test(a.service)) return at("service", "is not a compose service name");
  if (a.argv.length === 0 || a.argv.length > EXEC_LIMITS.argv) return at("argv", `must hold 1-${EXEC_LIMITS.argv} entries`);
  for (const [i, arg] of a.argv.entries()) {
    if (arg === "") return at(`argv[${i}]`, "is empty");
    if (arg.includes("\0")) return at(`argv[${i}]`, "contains NUL");
    if (Buffer.byteLength(arg) > EXEC_LIMITS.argBytes) return at(`argv[${i}]`, `is over ${EXEC_LIMITS.argBytes} bytes`);
  }
  if (a.user !== "" && !CONTAINER_USER.test(a.user)) return at("user", "must be a name or uid, optionally :group or :gid");
  if (a.workdir !== "" && (!a.workdir.startsWith("/") || /[\0\n]/.test(a.workdir) || a.workdir.length > 4096))
    return at("workdir", "must be an absolute path (at most 4096 characters, no NUL or newline)");
  const env = Object.entries(a.env);
  if (env.length > EXEC_LIMITS.env) return at("env", `must hold at most ${EXEC_LIMITS.env} variables`);
  for (const [k, v] of env) {
    if (!ENV_KEY.test(k)) return at("env", `key ${JSON.stringify(k.slice(0, 64))} is not a valid variable name`);
    if (v.includes("\0") || Buffer.byteLength(v) > EXEC_LIMITS.argBytes)
      return at(`env.${k}`, `must be at most ${EXEC_LIMITS.argBytes} bytes without NUL`);
  }
  if (a.stdin.length > EXEC_LIMITS.stdinBytes) return at("stdin", `must be at most ${EXEC_LIMITS.stdinBytes} bytes`);
  return undefined;
}
