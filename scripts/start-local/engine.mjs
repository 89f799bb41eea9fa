// The Docker engine `npm start`'s agent deploys to, and what npm start owns of it.
//
//   DOCKER_HOST set                 that engine: shared, never started or stopped here
//   root, SKIPPER_START_ENGINE unset a private engine of this checkout in <agent home>/docker,
//   or "private"                     started when it does not answer (scripts/docker-engine.sh
//                                    private); its agent alone deploys there
//   otherwise ("shared", not root)  the engine at /var/run/docker.sock when one answers
//
// On the way out (release): an engine this start started is stopped, unless it runs containers
// its agent did not deploy (someone used it meanwhile): it is then left running, and said so. On
// an engine it did not start nothing is stopped; the containers its agent deployed are named.
// The agent's containers are told apart by compose's working-directory label: its projects live
// under <work dir>/tenants/.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { join } from "node:path";

/** Unix socket paths are at most 107 bytes; dockerd puts containerd's below <dir>/exec/. */
const MAX_ENGINE_DIR = 60;

/** Where the private engine keeps its state: <agent home>/docker, or a short /tmp path when that is too long for sockets. */
export function privateEngineDir(agentHome) {
  const dir = join(agentHome, "docker");
  if (dir.length <= MAX_ENGINE_DIR) return dir;
  return `/tmp/skipper-start-${createHash("sha256").update(dir).digest("hex").slice(0, 12)}`;
}

/**
 * Chooses the engine (above). Returns { host, started, dir, how } (host undefined: none), where
 * `how` says in words which engine it is and whether this start started it.
 */
export function chooseEngine({ env, root, agentHome, say }) {
  const script = join(root, "scripts/docker-engine.sh");
  const run = (args) => {
    const r = spawnSync(script, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env });
    const host = /DOCKER_HOST=(\S+)/.exec(r.stdout ?? "")?.[1];
    return { host: r.status === 0 ? host : undefined, stderr: r.stderr ?? "" };
  };
  if (env.DOCKER_HOST) return { host: env.DOCKER_HOST, started: false, how: `${env.DOCKER_HOST} (DOCKER_HOST; not started by npm start)` };
  const mode = env.SKIPPER_START_ENGINE ?? (process.getuid?.() === 0 ? "private" : "shared");
  if (mode !== "private" && mode !== "shared") say(`SKIPPER_START_ENGINE=${mode}: expected private or shared; using shared`);
  if (mode === "private") {
    const dir = privateEngineDir(agentHome);
    const { host, stderr } = run(["private", dir]);
    if (host) {
      const started = /starting dockerd/.test(stderr);
      const how = started
        ? `${host} (private to this checkout, started now in ${dir}; stopped on Ctrl-C)`
        : `${host} (private to this checkout, in ${dir}; already running, not started by this start: left running)`;
      return { host, started, dir, how };
    }
    say(`no private engine in ${dir}: ${lastLine(stderr)}; trying the machine's engine`);
  }
  const { host, stderr } = run(["shared"]);
  if (host) return { host, started: false, how: `${host} (the machine's engine, shared; not started by npm start)` };
  return { host: undefined, started: false, how: `none (${lastLine(stderr)}): the agent reports in its heartbeat that it cannot deploy` };
}

/** How a person makes npm start share an engine, or keep one of its own. */
export const SHARING_HINT =
  "DOCKER_HOST=unix:///var/run/docker.sock npm start shares an engine; SKIPPER_START_ENGINE=private|shared chooses without one";

/**
 * What npm start owns of the engine, let go of at its end: stops a private engine it started
 * unless something else runs there; never touches containers its agent did not deploy.
 */
export function releaseEngine({ engine, workDir, root, env, say }) {
  if (!engine.host) return;
  const containers = listContainers(engine.host);
  if (containers === undefined) {
    if (engine.started) stopEngine(engine, root, env, say, "it does not answer to a listing");
    return;
  }
  const ours = containers.filter((c) => c.workingDir.startsWith(`${join(workDir, "tenants")}/`));
  const others = containers.filter((c) => !ours.includes(c) && c.running);
  if (!engine.started) {
    if (ours.length > 0)
      say(
        `left running on ${engine.host} (an engine npm start did not start): the ${ours.length} container(s) its agent deployed (${names(ours)}); delete the tenant to take them down`,
      );
    return;
  }
  if (others.length > 0) {
    say(
      `left the private engine ${engine.host} running: it also runs ${others.length} container(s) npm start's agent did not deploy (${names(others)}); stop it with: scripts/docker-engine.sh stop ${engine.dir}`,
    );
    return;
  }
  stopEngine(engine, root, env, say, `with the ${ours.length} container(s) its agent deployed (they start again with it next time)`);
}

function stopEngine(engine, root, env, say, why) {
  say(`stopping the private engine npm start started (${engine.dir}), ${why}`);
  spawnSync(join(root, "scripts/docker-engine.sh"), ["stop", engine.dir], { stdio: "inherit", env });
}

/** Every container of the engine with its compose working directory; undefined when it cannot tell. */
function listContainers(host) {
  const format = '{{.Names}}\t{{.State}}\t{{.Label "com.docker.compose.project.working_dir"}}';
  const r = spawnSync("docker", ["ps", "-a", "--format", format], {
    encoding: "utf8",
    env: { ...process.env, DOCKER_HOST: host },
    timeout: 20_000,
  });
  if (r.status !== 0) return undefined;
  return r.stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => {
      const [name, state, workingDir = ""] = l.split("\t");
      return { name, running: state === "running" || state === "restarting", workingDir };
    });
}

const names = (cs) =>
  cs
    .slice(0, 5)
    .map((c) => c.name)
    .join(", ") + (cs.length > 5 ? ", …" : "");

const lastLine = (text) =>
  text
    .trim()
    .split("\n")
    .filter(Boolean)
    .pop()
    ?.replace(/^docker-engine: /, "") ?? "no answer";
