// Once per test run: a Docker engine and a PostgreSQL server for the tests that need them; when
// one cannot be had, the tests that need it are skipped, loudly. Both are left running for the
// next run to reuse.
//   - Docker (scripts/docker-engine.sh: reuses a running engine or starts a private dockerd, and
//     loads the busybox test image). Tests read SKIPPER_TEST_DOCKER_HOST; SKIPPER_TEST_DOCKER=0
//     turns it off.
//   - PostgreSQL (scripts/postgres.sh: a private server in /tmp/skipper-postgres). Tests read
//     SKIPPER_TEST_PG_URL through test/helpers/postgres.ts; SKIPPER_TEST_PG=0 turns it off, and a
//     SKIPPER_TEST_PG_URL set beforehand names a server of one's own instead.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export default function setup(): void {
  startDocker();
  startPostgres();
}

function startDocker(): void {
  if (process.env.SKIPPER_TEST_DOCKER === "0") {
    console.warn("\n!!! SKIPPER_TEST_DOCKER=0: tests that need a Docker engine are SKIPPED\n");
    return;
  }
  const script = fileURLToPath(new URL("../scripts/docker-engine.sh", import.meta.url));
  try {
    const out = execFileSync(script, ["start"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: 120_000 });
    const host = /DOCKER_HOST=(\S+)/.exec(out)?.[1];
    if (!host) throw new Error(`no DOCKER_HOST in: ${out}`);
    process.env.SKIPPER_TEST_DOCKER_HOST = host;
  } catch (e) {
    console.warn(
      `\n!!! No Docker engine could be started (${(e as Error).message.split("\n")[0]}):\n!!! tests that need one are SKIPPED\n`,
    );
    return;
  }
  // A second engine stands for a second host in the placement tests (each node has its own).
  const second = "/tmp/skipper-docker-b";
  try {
    const out = execFileSync(script, ["start", second], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      timeout: 120_000,
      env: { ...process.env, DOCKER_HOST: `unix://${second}/docker.sock`, SKIPPER_DOCKER_ADDRESS_POOL: "10.201.0.0/16" },
    });
    const host = /DOCKER_HOST=(\S+)/.exec(out)?.[1];
    if (host && host !== process.env.SKIPPER_TEST_DOCKER_HOST) process.env.SKIPPER_TEST_DOCKER_HOST_B = host;
    else console.warn("\n!!! no second Docker engine (the first one was reused): two-node tests are SKIPPED\n");
  } catch (e) {
    console.warn(`\n!!! No second Docker engine (${(e as Error).message.split("\n")[0]}): two-node tests are SKIPPED\n`);
  }
}

function startPostgres(): void {
  if (process.env.SKIPPER_TEST_PG === "0") {
    delete process.env.SKIPPER_TEST_PG_URL;
    console.warn("\n!!! SKIPPER_TEST_PG=0: tests that need PostgreSQL are SKIPPED\n");
    return;
  }
  if (process.env.SKIPPER_TEST_PG_URL) return;
  const script = fileURLToPath(new URL("../scripts/postgres.sh", import.meta.url));
  try {
    const out = execFileSync(script, ["start"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: 120_000 });
    const url = /SKIPPER_STORE_URL=(\S+)/.exec(out)?.[1];
    if (!url) throw new Error(`no SKIPPER_STORE_URL in: ${out}`);
    process.env.SKIPPER_TEST_PG_URL = url;
  } catch (e) {
    console.warn(
      `\n!!! No PostgreSQL server could be started (${(e as Error).message.split("\n")[0]}):\n!!! tests that need one are SKIPPED\n`,
    );
  }
}
