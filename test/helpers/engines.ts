// More Docker engines for tests that need one per node: a tenant's Compose project has the same
// name on every node (its tenant id), so two nodes on one engine would run one project between
// them. test/global-setup.ts starts two engines (SKIPPER_TEST_DOCKER_HOST, _B); this starts the
// others the same way (scripts/docker-engine.sh, a private dockerd with its own state directory
// and address pool), and, like the global setup, leaves them running for the next run to reuse.
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const SCRIPT = fileURLToPath(new URL("../../scripts/docker-engine.sh", import.meta.url));

/**
 * `count` distinct Docker engines: the two of the global setup, then private ones in
 * /tmp/skipper-docker-<n> (n = c, d, ...; address pools 10.202.0.0/16, 10.203.0.0/16, ...).
 * Fewer when an engine cannot be had or the script reuses one already listed (a system engine
 * answering on /var/run/docker.sock): callers skip then.
 */
export async function dockerEngines(count: number): Promise<string[]> {
  const hosts = [process.env.SKIPPER_TEST_DOCKER_HOST, process.env.SKIPPER_TEST_DOCKER_HOST_B].filter((h): h is string => !!h);
  if (hosts.length < 2) return hosts.slice(0, count);
  const extra = Array.from({ length: Math.max(0, count - hosts.length) }, (_, i) => i);
  const started = await Promise.all(extra.map((i) => startEngine(String.fromCharCode(99 + i), 202 + i)));
  for (const h of started) if (h && !hosts.includes(h)) hosts.push(h);
  return hosts.slice(0, count);
}

async function startEngine(suffix: string, poolOctet: number): Promise<string | undefined> {
  const dir = `/tmp/skipper-docker-${suffix}`;
  try {
    const { stdout } = await run(SCRIPT, ["start", dir], {
      encoding: "utf8",
      timeout: 120_000,
      env: { ...process.env, DOCKER_HOST: `unix://${dir}/docker.sock`, SKIPPER_DOCKER_ADDRESS_POOL: `10.${poolOctet}.0.0/16` },
    });
    return /DOCKER_HOST=(\S+)/.exec(stdout)?.[1];
  } catch (e) {
    console.warn(`!!! no Docker engine in ${dir}: ${(e as Error).message.split("\n")[0]}`);
    return undefined;
  }
}
