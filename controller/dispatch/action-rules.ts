// Rules for the payloads of ad-hoc work orders, shared by the controller (which refuses a bad
// request before anything is stored) and the agent (which checks again: it trusts no one with
// its host). Pure functions returning a problem description, or undefined when the value is fine.
import { posix } from "node:path";

export const MODULE_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const MODULE_VERSION = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$/;
export const SHA256_HEX = /^[0-9a-fA-F]{64}$/;
/** Compose service names. */
export const COMPOSE_SERVICE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/;
export const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

/** Names in a tenant's project directory that belong to the agent, not to uploads. */
const RESERVED = new Set(["docker-compose.yml", ".env", ".skipper-state.json", ".skipper-sticker.json", ".previous"]);

/** Problem with an upload path (relative, normalised, inside its base, not the agent's own files). */
export function uploadPathProblem(path: string): string | undefined {
  if (path === "" || path.length > 4096) return "must be 1-4096 characters";
  if (path.includes("\0") || path.includes("\\")) return "must not contain NUL or backslashes";
  if (path.startsWith("/")) return "must be relative";
  const parts = path.split("/");
  if (parts.some((p) => p === "" || p === "." || p === "..")) return "must be normalised: no empty, '.' or '..' segments";
  if (posix.normalize(path) !== path) return "must be normalised";
  if (RESERVED.has(parts[0]!) || parts[0]!.startsWith(".staging-")) return `'${parts[0]}' is managed by the agent`;
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
