// A project's secret values on this host. They arrive for the order being applied (the
// controller hands them to the claim holder, never in the order itself) and live in one place
// only: the project's secret directory, <project>/.skipper-secrets (mode 0700, files 0600).
//
//   <name>              a compose secret's content (the compose file declares
//                       file: ./.skipper-secrets/<name>; Compose mounts it at /run/secrets/...)
//   .env.json           the secret variables, handed to Compose in its environment, never in .env
//   .docker/config.json the registry logins of the project's pulls (DOCKER_CONFIG for Compose),
//                       so the host's own Docker config never holds them
//
// The last directory that applied successfully is kept beside it (.skipper-applied-secrets) for
// restoring that spec when a later deploy fails its gate. Removing the project removes both.
import { chmod, cp, mkdir, readdir, readFile, rename, rm, stat, symlink } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import type { WorkOrderDesiredState } from "../../gen/skipper/v1/work_order_pb.js";
import { isSecretKey } from "../../common/logging/redact.js";
import { COMPOSE_STEERING_ENV, ENV_KEY, REGISTRY_HOST, SECRET_FILE_NAME } from "../../common/action-rules.js";
import { writeFileAtomic } from "./durable-file.js";
import { withoutAgentSecrets } from "./run-command.js";

export const SECRET_DIR = ".skipper-secrets";
export const APPLIED_SECRET_DIR = ".skipper-applied-secrets";
const ENV_FILE = ".env.json";
// In the applied copy: the spec hash the values ran with.
const SPEC_TAG = ".spec";
const DOCKER_DIR = ".docker";

export interface RegistryLogin {
  registry: string;
  username: string;
  password: string;
}

/** The values one order's project uses, by the names its project gives them. */
export interface ProjectSecrets {
  env: Record<string, string>;
  files: Record<string, string>;
  registries: RegistryLogin[];
}

/** Where an order's secret values come from: the controller, or (restoring a spec) the applied copy. */
export type SecretSource = () => Promise<ProjectSecrets>;

/** True when the order's project uses secret values (and the agent must fetch them). */
export function usesSecrets(ds: WorkOrderDesiredState | undefined): boolean {
  const p = ds?.composeProject;
  return Object.keys(p?.secretEnv ?? {}).length + Object.keys(p?.secretFiles ?? {}).length + (ds?.registrySecretIds.length ?? 0) > 0;
}

/** What is wrong with the values for `ds` (names the project cannot use, values missing), if anything. */
export function secretsProblem(ds: WorkOrderDesiredState | undefined, s: ProjectSecrets): string | undefined {
  const p = ds?.composeProject;
  for (const name of Object.keys(p?.secretEnv ?? {})) {
    if (!ENV_KEY.test(name)) return `secret variable ${JSON.stringify(name)} is not a valid variable name`;
    if (COMPOSE_STEERING_ENV.test(name)) return `secret variable ${name} would steer Compose itself`;
    if (s.env[name] === undefined) return `the value of secret variable ${name} did not arrive`;
    if (/[\0]/.test(s.env[name])) return `the value of secret variable ${name} contains a NUL byte`;
  }
  for (const name of Object.keys(p?.secretFiles ?? {})) {
    if (!SECRET_FILE_NAME.test(name)) return `secret file ${JSON.stringify(name)} cannot name a file`;
    if (s.files[name] === undefined) return `the content of secret file ${name} did not arrive`;
  }
  for (const r of s.registries) if (!REGISTRY_HOST.test(r.registry)) return `registry ${JSON.stringify(r.registry)} is not a registry host`;
  return undefined;
}

// Docker Hub's logins are filed under its v1 index URL by the Docker CLI, Compose v2 and docker-py.
const DOCKER_HUB_KEY = "https://index.docker.io/v1/";
const DOCKER_HUB = new Set(["docker.io", "index.docker.io", "registry-1.docker.io"]);

/** The key a registry's login is filed under in a Docker config.json. */
export function authKey(registry: string): string {
  return DOCKER_HUB.has(registry) ? DOCKER_HUB_KEY : registry;
}

/** Only what the order's project names: a reply cannot add a file or a variable the order did not ask for. */
export function namedInOrder(ds: WorkOrderDesiredState | undefined, s: ProjectSecrets): ProjectSecrets {
  const p = ds?.composeProject;
  const pick = (from: Record<string, string>, names: string[]) =>
    Object.fromEntries(names.filter((n) => from[n] !== undefined).map((n) => [n, from[n]!]));
  return {
    env: pick(s.env, Object.keys(p?.secretEnv ?? {})),
    files: pick(s.files, Object.keys(p?.secretFiles ?? {})),
    registries: s.registries,
  };
}

/** Every value, for blanking out of command output. */
export function secretValues(s: ProjectSecrets | undefined): string[] {
  if (!s) return [];
  return [...Object.values(s.env), ...Object.values(s.files), ...s.registries.map((r) => r.password)];
}

/** Writes the values into `dir` (a fresh secret directory: created 0700, files 0600). */
export async function writeSecretDir(dir: string, s: ProjectSecrets): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  for (const [name, content] of Object.entries(s.files)) await writeFileAtomic(join(dir, name), content, { mode: 0o600 });
  await writeFileAtomic(join(dir, ENV_FILE), `${JSON.stringify(s.env)}\n`, { mode: 0o600 });
  if (s.registries.length > 0) {
    const docker = join(dir, DOCKER_DIR);
    await mkdir(docker, { mode: 0o700 });
    const auths = Object.fromEntries(
      s.registries.map((r) => [authKey(r.registry), { auth: Buffer.from(`${r.username}:${r.password}`, "utf8").toString("base64") }]),
    );
    // The host's Docker config stays the host's, but what it chooses (the engine context, the
    // `docker compose` plugin) must still hold with a config of the project's own.
    const host = process.env.DOCKER_CONFIG || join(homedir(), ".docker");
    const currentContext = await readFile(join(host, "config.json"), "utf8")
      .then((t) => (JSON.parse(t) as { currentContext?: unknown }).currentContext)
      .catch(() => undefined);
    const config = { auths, ...(typeof currentContext === "string" ? { currentContext } : {}) };
    await writeFileAtomic(join(docker, "config.json"), `${JSON.stringify(config)}\n`, { mode: 0o600 });
    for (const sub of ["cli-plugins", "contexts"]) if (await isDir(join(host, sub))) await symlink(join(host, sub), join(docker, sub));
  }
}

/** The values a secret directory holds (a restore deploys them again). */
export async function readSecretDir(dir: string): Promise<ProjectSecrets> {
  const env = JSON.parse(await readFile(join(dir, ENV_FILE), "utf8")) as Record<string, string>;
  const files: Record<string, string> = {};
  for (const name of await readdir(dir)) if (SECRET_FILE_NAME.test(name)) files[name] = await readFile(join(dir, name), "utf8");
  const registries: RegistryLogin[] = [];
  const config = await readFile(join(dir, DOCKER_DIR, "config.json"), "utf8").catch(() => undefined);
  if (config) {
    const auths = (JSON.parse(config) as { auths?: Record<string, { auth: string }> }).auths ?? {};
    for (const [key, { auth }] of Object.entries(auths)) {
      const registry = key === DOCKER_HUB_KEY ? "docker.io" : key;
      const plain = Buffer.from(auth, "base64").toString("utf8");
      const at = plain.indexOf(":");
      registries.push({ registry, username: plain.slice(0, at), password: plain.slice(at + 1) });
    }
  }
  return { env, files, registries };
}

// Variables the agent's own environment keeps for Compose whatever the project's env says: what
// finds and reaches the engine.
const KEPT_FROM_AGENT = /^(PATH|HOME|TMPDIR|DOCKER_.*)$/;

/**
 * The environment Compose runs with for a project whose .env holds `env` and whose secret values
 * are `s` (kept in `dir`). Compose prefers its own environment to .env when it interpolates, so
 * the agent's variables of the same names are left out (the project's value wins, not whatever
 * the agent was started with); secret variables are set, and the project's Docker config when it
 * logs in to registries.
 */
export function composeEnvironment(
  env: Record<string, string>,
  dir: string,
  s: ProjectSecrets | undefined,
): Record<string, string | undefined> {
  // Nor does Compose see the agent's own secrets (its node token): a compose file could interpolate
  // them into a container.
  const out: Record<string, string | undefined> = withoutAgentSecrets();
  for (const k of Object.keys(env)) if (!KEPT_FROM_AGENT.test(k)) out[k] = undefined;
  if (!s) return out;
  return { ...out, ...s.env, ...(s.registries.length > 0 ? { DOCKER_CONFIG: join(dir, DOCKER_DIR) } : {}) };
}

/**
 * Keeps the live secret directory of a project as the one to restore (after a successful apply
 * of `specHash`), tagged with that spec: copied aside, then swapped in by renames.
 */
export async function keepAppliedSecrets(projectDir: string, specHash: string): Promise<void> {
  const live = join(projectDir, SECRET_DIR);
  const applied = join(projectDir, APPLIED_SECRET_DIR);
  const temp = `${applied}.tmp`;
  const old = `${applied}.old`;
  await rm(temp, { recursive: true, force: true });
  await rm(old, { recursive: true, force: true });
  if (await isDir(live)) {
    await cp(live, temp, { recursive: true, verbatimSymlinks: true });
    await chmod(temp, 0o700);
  } else {
    await mkdir(temp, { mode: 0o700 });
  }
  await writeFileAtomic(join(temp, SPEC_TAG), `${specHash}\n`, { mode: 0o600 });
  if (await isDir(applied)) await rename(applied, old);
  await rename(temp, applied);
  await rm(old, { recursive: true, force: true });
}

/** The values kept for restoring `specHash`; throws when the kept ones are another spec's (or none). */
export async function readAppliedSecrets(projectDir: string, specHash: string): Promise<ProjectSecrets> {
  const dir = join(projectDir, APPLIED_SECRET_DIR);
  const tag = (await readFile(join(dir, SPEC_TAG), "utf8").catch(() => "")).trim();
  if (tag !== specHash)
    throw new Error(`the values kept on this node are for spec ${tag.slice(0, 12) || "(none)"}, not ${specHash.slice(0, 12)}`);
  return readSecretDir(dir);
}

async function isDir(p: string): Promise<boolean> {
  return stat(p).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

/**
 * Every value the project in `dir` holds as a secret: its secret directory (or the applied copy)
 * and the secret-shaped values of its .env. A container may well print them (read_logs and
 * exec_service blank them from what they report).
 */
export async function projectSecretValues(dir: string): Promise<string[]> {
  const values: string[] = [];
  for (const d of [SECRET_DIR, APPLIED_SECRET_DIR]) {
    const s = await readSecretDir(join(dir, d)).catch(() => undefined);
    values.push(...secretValues(s));
  }
  const env = await readFile(join(dir, ".env"), "utf8").catch(() => "");
  for (const line of env.split("\n")) {
    const at = line.indexOf("=");
    if (at > 0 && isSecretKey(line.slice(0, at))) values.push(line.slice(at + 1));
  }
  return [...new Set(values)];
}
