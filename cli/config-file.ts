// The CLI's contexts: which controller to talk to, the CA that signs its certificate, and the
// credential (admin token or API key), by name, with one current. Kept in
// $XDG_CONFIG_HOME/skipper/config.yaml (else ~/.config/skipper/config.yaml), mode 0600 in a 0700
// directory because it holds credentials; written whole to a temporary file and renamed, so a
// reader never sees half of it. Shape:
//
//   current-context: local
//   contexts:
//     local:
//       server: https://127.0.0.1:8443
//       ca-file: /home/me/skipper/data/tls/ca.crt
//       token: ska.…
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { parse, stringify } from "yaml";
import { CliError } from "./errors.js";

/** One controller and how to reach it. */
export interface Context {
  server: string;
  caFile?: string;
  token?: string;
}

/** The whole file. */
export interface CliConfig {
  currentContext?: string;
  contexts: Record<string, Context>;
}

/** Where the config file is, from the environment (XDG base directories). */
export function configPath(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CONFIG_HOME?.startsWith("/") ? env.XDG_CONFIG_HOME : join(env.HOME || homedir(), ".config");
  return join(base, "skipper", "config.yaml");
}

/** Reads the config file; a missing file is an empty config. */
export function readConfig(path: string): CliConfig {
  if (!existsSync(path)) return { contexts: {} };
  let doc: unknown;
  try {
    doc = parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new CliError(`${path} is not valid YAML: ${(e as Error).message}`, { hint: "fix or remove it, then run `skipper login` again" });
  }
  if (doc === null || doc === undefined) return { contexts: {} };
  if (typeof doc !== "object" || Array.isArray(doc)) throw new CliError(`${path} must hold a YAML mapping`);
  const raw = doc as Record<string, unknown>;
  const contexts: Record<string, Context> = {};
  for (const [name, c] of Object.entries((raw.contexts as Record<string, unknown>) ?? {})) {
    if (typeof c !== "object" || c === null) throw new CliError(`${path}: context ${name} must be a mapping`);
    const ctx = c as Record<string, unknown>;
    if (typeof ctx.server !== "string") throw new CliError(`${path}: context ${name} has no server`);
    contexts[name] = {
      server: ctx.server,
      ...(typeof ctx["ca-file"] === "string" ? { caFile: ctx["ca-file"] } : {}),
      ...(typeof ctx.token === "string" ? { token: ctx.token } : {}),
    };
  }
  const current = raw["current-context"];
  return { contexts, ...(typeof current === "string" ? { currentContext: current } : {}) };
}

/** Writes the config file with mode 0600 (its directory 0700), atomically. */
export function writeConfig(path: string, config: CliConfig): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const contexts: Record<string, Record<string, string>> = {};
  for (const [name, c] of Object.entries(config.contexts)) {
    contexts[name] = { server: c.server, ...(c.caFile ? { "ca-file": c.caFile } : {}), ...(c.token ? { token: c.token } : {}) };
  }
  const text = stringify({ ...(config.currentContext ? { "current-context": config.currentContext } : {}), contexts });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `# skipper CLI contexts (holds credentials: keep it mode 0600)\n${text}`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

/** A warning when the file can be read by others (it holds credentials), else undefined. */
export function permissionProblem(path: string): string | undefined {
  if (!existsSync(path)) return undefined;
  const mode = statSync(path).mode & 0o777;
  return mode & 0o077 ? `${path} is readable by others (mode ${mode.toString(8)}): run chmod 600 ${path}` : undefined;
}
