// skippy as one file: the bundle runs with Node alone, from a directory outside the repository
// holding nothing else (no node_modules to be found on the way up), as it does on a new host.
import { copyFile, mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildAgentBundle, SERVICE_PATH } from "./helpers/bundle.js";
import { parsePrometheusText } from "./helpers/prometheus-text.js";

describe("the agent bundle", () => {
  let root: string;
  let host: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skippy-bundle-"));
    const built = await buildAgentBundle(join(root, "build"));
    host = join(root, "host");
    await mkdir(host);
    await copyFile(built, join(host, "skippy.mjs"));
  });

  afterAll(async () => {
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("prints its usage with nothing but Node and the one file", async () => {
    expect(await readdir(host)).toEqual(["skippy.mjs"]);
    const run = await execa(process.execPath, [join(host, "skippy.mjs"), "--help"], {
      cwd: host,
      env: { PATH: SERVICE_PATH },
      extendEnv: false,
      reject: false,
    });
    expect(run.stderr).toBe("");
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toMatch(/^Usage: skippy \[options\]/);
    expect(run.stdout).toContain("--node-id ID");
  });

  it("refuses a bad configuration with the agent's own message", async () => {
    const run = await execa(process.execPath, [join(host, "skippy.mjs"), "--node-id", "a/b", "--token", "t"], {
      cwd: host,
      env: { PATH: SERVICE_PATH },
      extendEnv: false,
      reject: false,
    });
    expect(run.exitCode).toBe(2);
    expect(run.stderr).toMatch(/^skippy: --node-id \(SKIPPY_NODE_ID\) 'a\/b' is not an id/);
  });

  it("serves its metrics at --metrics-listen from the one file (prom-client inside it), while no controller answers", async () => {
    const child = execa(
      process.execPath,
      [
        join(host, "skippy.mjs"),
        "--node-id",
        "n1",
        "--token",
        "t",
        "--controller",
        "http://127.0.0.1:9",
        "--metrics-listen",
        "127.0.0.1:0",
      ],
      {
        cwd: host,
        env: { PATH: SERVICE_PATH, SKIPPY_STATE_DIR: join(root, "state"), SKIPPY_WORK_DIR: join(root, "work") },
        extendEnv: false,
      },
    );
    try {
      // The address it listens on, from its log line saying so.
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout!.on("data", (d: Buffer) => {
          for (const line of d.toString("utf8").split("\n")) {
            if (line.includes('"metrics_listen"')) resolve((JSON.parse(line) as { metadata: { url: string } }).metadata.url);
          }
        });
        child.catch(reject);
      });
      const text = await (await fetch(url)).text();
      const families = parsePrometheusText(text);
      expect(families.get("skippy_heartbeat_failures_total")?.type).toBe("counter");
      expect(families.get("process_cpu_user_seconds_total")?.type).toBe("counter");
    } finally {
      child.kill("SIGTERM");
      await child.catch(() => undefined);
    }
  });
});
