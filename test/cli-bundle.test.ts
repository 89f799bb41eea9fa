// skipper as one file: the CLI's bundle runs with Node alone, from a directory outside the
// repository holding nothing else (no node_modules to be found on the way up), as it does on an
// operator's machine, and talks to a real controller over HTTP/2 + TLS.
import { copyFile, mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { buildCliBundle, SERVICE_PATH } from "./helpers/bundle.js";
import { E2E_ADMIN_TOKEN, startControllerProcess, type ControllerProcess } from "./helpers/processes.js";

const NODE = "bundle-cli-node";

describe("the CLI bundle", () => {
  let root: string;
  let host: string;
  let ctl: ControllerProcess;

  // Nothing of the test's environment: no SKIPPER_* variables, a home of its own.
  const skipper = (args: string[]) =>
    execa(process.execPath, [join(host, "skipper.mjs"), ...args], {
      cwd: host,
      env: { PATH: SERVICE_PATH, HOME: host },
      extendEnv: false,
      reject: false,
    });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-cli-bundle-"));
    const built = await buildCliBundle(join(root, "build"));
    host = join(root, "host");
    await mkdir(host);
    await copyFile(built, join(host, "skipper.mjs"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    await ctl.admin(NodeService).registerNode({ nodeId: NODE, labels: { region: "eu" } });
  });

  afterAll(async () => {
    await ctl?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("prints its usage with nothing but Node and the one file", async () => {
    expect(await readdir(host)).toEqual(["skipper.mjs"]);
    const run = await skipper(["--help"]);
    expect(run.stderr).toBe("");
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toMatch(/^Usage: skipper \[options\] \[command\]/);
    expect(run.stdout).toContain("logs [options] <tenant>");
  });

  it("lists a real controller's nodes, given the server, its CA and a token as flags", async () => {
    const run = await skipper(["nodes", "--server", ctl.url, "--ca-file", ctl.caFile, "--token", E2E_ADMIN_TOKEN]);
    expect(run.stderr).toBe("");
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`^${NODE}\\b.*region=eu`, "m"));
  });

  it("refuses a wrong token with the controller's answer and exit code 1", async () => {
    const run = await skipper(["nodes", "--server", ctl.url, "--ca-file", ctl.caFile, "--token", "not-the-token"]);
    expect(run.exitCode).toBe(1);
    expect(run.stderr).toMatch(/^error: UNAUTHORIZED: invalid token$/m);
  });
});
