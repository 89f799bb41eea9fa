// `skippy install` from the one-file bundle, as on a new host: it writes the bundle's copy, the
// settings, the token, the CA and skippy.service into a temp tree (--prefix), leaves them as they
// are when run again, refuses bad input without writing, and what it installed, started as
// systemd starts it (the unit's ExecStart with its EnvironmentFile), heartbeats to a real
// controller over TLS.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createWriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadAgentConfig } from "../agent/config.js";
import { parseInstall } from "../agent/install-options.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { buildAgentBundle, SERVICE_PATH } from "./helpers/bundle.js";
import { startControllerProcess, stopProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";

const NODE = "install-host";
const systemdAnalyze = (() => {
  try {
    execFileSync("systemd-analyze", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

/** Every file under `dir`: relative path -> its sha256, permission bits and modification time. */
async function tree(dir: string): Promise<Record<string, { sha256: string; mode: number; mtimeMs: number }>> {
  const out: Record<string, { sha256: string; mode: number; mtimeMs: number }> = {};
  for (const rel of (await readdir(dir, { recursive: true })).sort()) {
    const info = await stat(join(dir, rel));
    if (!info.isFile()) continue;
    const sha256 = createHash("sha256")
      .update(await readFile(join(dir, rel)))
      .digest("hex");
    out[rel] = { sha256, mode: info.mode & 0o7777, mtimeMs: info.mtimeMs };
  }
  return out;
}

/** The KEY="value" lines of an environment file. */
function parseEnvFile(text: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([A-Z_][A-Z0-9_]*)="([^"]*)"$/.exec(line);
    if (!m) throw new Error(`not an environment line: ${line}`);
    env[m[1]!] = m[2]!;
  }
  return env;
}

/** The value of `key=` in a unit file's text (the last one, as systemd reads it). */
function unitSetting(unit: string, key: string): string {
  const values = unit.split("\n").flatMap((l) => (l.startsWith(`${key}=`) ? [l.slice(key.length + 1)] : []));
  if (values.length === 0) throw new Error(`no ${key}= in the unit`);
  return values.at(-1)!;
}

describe("skippy install", () => {
  let root: string;
  let host: string;
  let bundle: string;
  let ctl: ControllerProcess;
  let token: string;
  let tokenFile: string;
  const outputs: string[] = [];

  /** `node skippy.mjs install …` from the host directory, with a service's PATH and nothing else. */
  async function install(args: string[]) {
    const run = await execa(process.execPath, [bundle, "install", ...args], {
      cwd: host,
      env: { PATH: SERVICE_PATH },
      extendEnv: false,
      reject: false,
    });
    outputs.push(run.stdout, run.stderr);
    return run;
  }
  const joinArgs = (prefix: string, more: string[] = []) => [
    "--controller",
    ctl.url,
    "--node-id",
    NODE,
    "--token-file",
    tokenFile,
    "--ca-file",
    ctl.caFile,
    "--label",
    "env=test",
    "--poll-interval",
    "200ms",
    "--prefix",
    prefix,
    ...more,
  ];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skippy-install-"));
    host = join(root, "host");
    await mkdir(host);
    bundle = join(host, "skippy.mjs");
    await copyFile(await buildAgentBundle(join(root, "build")), bundle);
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE, displayName: "installed", labels: { env: "test" } })).token;
    tokenFile = join(host, "token");
    await writeFile(tokenFile, `${token}\n`, { mode: 0o600 });
  });

  afterAll(async () => {
    await ctl?.stop();
    // Whatever a test printed, the node token was never part of it.
    for (const text of outputs) expect(text).not.toContain(token);
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("writes the bundle, token, CA, settings and unit with their modes, and nothing else", async () => {
    const prefix = join(root, "first");
    const run = await install(joinArgs(prefix));
    expect(run.stderr).toBe("");
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toContain("Next, as root:\n  systemctl daemon-reload && systemctl enable --now skippy\n");
    expect(run.stdout).not.toContain("systemctl restart");

    const files = await tree(prefix);
    expect(Object.fromEntries(Object.entries(files).map(([p, f]) => [p, f.mode.toString(8)]))).toEqual({
      "etc/skippy/ca.crt": "644",
      "etc/skippy/node-token": "600",
      "etc/skippy/skippy.env": "644",
      "etc/systemd/system/skippy.service": "644",
      "usr/local/lib/skippy/skippy.mjs": "755",
    });
    const read = (rel: string) => readFile(join(prefix, rel));
    expect((await read("usr/local/lib/skippy/skippy.mjs")).equals(await readFile(bundle))).toBe(true);
    expect((await read("etc/skippy/node-token")).toString()).toBe(`${token}\n`);
    expect((await read("etc/skippy/ca.crt")).toString()).toBe(ctl.ca);
    const envText = (await read("etc/skippy/skippy.env")).toString();
    expect(envText).not.toContain(token);
    expect(parseEnvFile(envText)).toEqual({
      SKIPPY_CONTROLLER_URL: ctl.url,
      SKIPPY_NODE_ID: NODE,
      SKIPPY_NODE_TOKEN_FILE: join(prefix, "etc/skippy/node-token"),
      SKIPPY_CA_FILE: join(prefix, "etc/skippy/ca.crt"),
      SKIPPY_STATE_DIR: join(prefix, "var/lib/skippy"),
      SKIPPY_WORK_DIR: join(prefix, "opt/skipper"),
      SKIPPY_POLL_INTERVAL: "200ms",
      SKIPPY_LABELS: "env=test",
    });
    const unit = (await read("etc/systemd/system/skippy.service")).toString();
    expect(unit).not.toContain(token);
    expect(unitSetting(unit, "EnvironmentFile")).toBe(join(prefix, "etc/skippy/skippy.env"));
    expect(unitSetting(unit, "ExecStart")).toBe(`${process.execPath} ${join(prefix, "usr/local/lib/skippy/skippy.mjs")} updater`);
    expect(unitSetting(unit, "Restart")).toBe("always");
    expect(unitSetting(unit, "WantedBy")).toBe("multi-user.target");
    if (systemdAnalyze) {
      const verify = await execa("systemd-analyze", ["verify", join(prefix, "etc/systemd/system/skippy.service")], { reject: false });
      expect(verify.stderr).toBe("");
      expect(verify.exitCode).toBe(0);
    }
  });

  it("run again, leaves every file as it is; changed input updates only what it changes", async () => {
    const prefix = join(root, "again");
    expect((await install(joinArgs(prefix))).exitCode).toBe(0);
    const first = await tree(prefix);

    const again = await install(joinArgs(prefix));
    expect(again.exitCode).toBe(0);
    expect(again.stdout.match(/^unchanged /gm)).toHaveLength(5);
    expect(again.stdout).toContain("Nothing changed.");
    expect(await tree(prefix)).toEqual(first);

    // Another label and no CA: the settings change, the CA copy goes, the rest stays.
    const changed = await install(
      joinArgs(prefix)
        .filter((a) => a !== "--ca-file" && a !== ctl.caFile)
        .map((a) => (a === "env=test" ? "env=prod" : a)),
    );
    expect(changed.stderr).toBe("");
    expect(changed.stdout).toContain(`updated ${join(prefix, "etc/skippy/skippy.env")} (0644)`);
    expect(changed.stdout).toContain(`removed ${join(prefix, "etc/skippy/ca.crt")}`);
    expect(changed.stdout).toContain("systemctl restart skippy");
    const after = await tree(prefix);
    expect(Object.keys(after)).toEqual(Object.keys(first).filter((p) => p !== "etc/skippy/ca.crt"));
    const env = parseEnvFile(await readFile(join(prefix, "etc/skippy/skippy.env"), "utf8"));
    expect(env.SKIPPY_LABELS).toBe("env=prod");
    expect(env.SKIPPY_CA_FILE).toBeUndefined();
    for (const p of ["usr/local/lib/skippy/skippy.mjs", "etc/skippy/node-token", "etc/systemd/system/skippy.service"])
      expect(after[p], p).toEqual(first[p]);
  });

  it("refuses bad input with a message naming it (the agent's own for its settings) and writes nothing", async () => {
    const fresh = join(root, "refused");
    const cases: [string[], RegExp][] = [
      [["--node-id", "a/b"], /^skippy install: --node-id \(SKIPPY_NODE_ID\) 'a\/b' is not an id: 1-128 characters/],
      [["--poll-interval", "1ms"], /poll interval/],
      [["--label", "env=a b"], /label must be KEY=VALUE/],
      [["--allow-command", "rm -rf"], /--allow-command takes a program name/],
      [["--metrics-listen", "0.0.0.0:9464"], /--metrics-listen 0\.0\.0\.0:9464 is not a loopback address/],
      [["--ca-file", tokenFile], /--ca-file .* is not a PEM certificate/],
      [["--token-file", join(host, "missing")], /cannot read the node token from --token-file .*missing: ENOENT/],
      [["--state-dir", "/var/lib/sk ippy"], /--state-dir must be an absolute path without spaces/],
      [["--node", join(host, "token")], /--node .*token is not an executable file/],
      [["--frobnicate"], /Unknown option '--frobnicate'/],
    ];
    for (const [bad, message] of cases) {
      const run = await install([...joinArgs(fresh), ...bad]);
      expect(run.exitCode, bad.join(" ")).toBe(2);
      expect(run.stderr, bad.join(" ")).toMatch(message);
      expect(run.stdout).toBe("");
    }
    await expect(stat(fresh)).rejects.toThrow(/ENOENT/);

    // On an installed host, too: nothing changes.
    const prefix = join(root, "installed");
    expect((await install(joinArgs(prefix))).exitCode).toBe(0);
    const before = await tree(prefix);
    expect((await install([...joinArgs(prefix), "--node-id", "../etc"])).exitCode).toBe(2);
    expect(await tree(prefix)).toEqual(before);
  });

  it("a dry run prints the settings and unit, never the token, and writes nothing", async () => {
    const prefix = join(root, "dry");
    const run = await install([...joinArgs(prefix), "--dry-run"]);
    expect(run.exitCode).toBe(0);
    expect(run.stdout).toContain(`would be created ${join(prefix, "etc/skippy/node-token")} (0600): the node token (not shown)`);
    expect(run.stdout).toContain(`    SKIPPY_NODE_ID="${NODE}"`);
    expect(run.stdout).toContain(`    ExecStart=${process.execPath} ${join(prefix, "usr/local/lib/skippy/skippy.mjs")} updater`);
    await expect(stat(prefix)).rejects.toThrow(/ENOENT/);
  });

  it("a user other than root may not write the system paths, only a tree of its own", () => {
    const ctx = { uid: 1000, node: process.execPath, readFile: () => Buffer.from("skn.token\n") };
    const args = ["--controller", "https://ctl.example:8443", "--node-id", NODE, "--token-file", "/t"];
    expect(() => parseInstall(args, ctx)).toThrow(/--config-dir, --unit-dir, --bin-dir needs root/);
    expect(() => parseInstall([...args, "--config-dir", "/home/me/skippy"], ctx)).toThrow(/--unit-dir, --bin-dir needs root/);
    expect(parseInstall([...args, "--dry-run"], ctx)).toMatchObject({ dryRun: true });
    expect(parseInstall([...args, "--prefix", "/home/me/skippy"], ctx)).toMatchObject({
      paths: { configDir: "/home/me/skippy/etc/skippy" },
    });
  });

  it("installs an enrollment token instead of a node token when asked, and refuses two credentials", () => {
    const ctx = { uid: 0, node: process.execPath, readFile: () => Buffer.from("ske_0a1b2c3d4e5f_secret\n") };
    const args = ["--controller", "https://ctl.example:8443", "--node-id", NODE, "--prefix", "/srv/x"];
    const req = parseInstall([...args, "--enroll-token-file", "/e"], ctx);
    if (req === "help") throw new Error("help");
    expect([req.enroll, req.token, req.env.SKIPPY_ENROLL_TOKEN_FILE, req.env.SKIPPY_NODE_TOKEN_FILE]).toEqual([
      true,
      "ske_0a1b2c3d4e5f_secret",
      "/srv/x/etc/skippy/enroll-token",
      undefined,
    ]);
    const cfg = loadAgentConfig([], req.env, () => "ske_0a1b2c3d4e5f_secret\n");
    expect(cfg !== "help" && [cfg.token, cfg.enrollToken]).toEqual(["", "ske_0a1b2c3d4e5f_secret"]);
    expect(() => parseInstall([...args, "--enroll-token-file", "/e", "--token-file", "/t"], ctx)).toThrow(/give one credential/);
    expect(() => parseInstall(args, ctx)).toThrow(/give one credential/);
  });

  it("the environment file configures the agent exactly as the same flags do", () => {
    const ctx = { uid: 0, node: process.execPath, readFile: () => Buffer.from("skn.token\n") };
    const agentFlags = [
      ...["--controller", "https://ctl.example:8443/", "--node-id", NODE, "--poll-interval", "2s", "--compose-timeout", "90s"],
      ...["--ready-timeout", "20s", "--log-level", "debug", "--wire", "binary", "--no-watch", "--label", "env=a", "--label", "zone=b"],
      ...["--allow-command", "uptime", "--allow-command", "/usr/bin/df", "--allow-process-source", "https://artifacts.example/skipper/"],
      ...["--state-dir", "/srv/skippy/state", "--work-dir", "/srv/skippy/work"],
      ...["--metrics-listen", "10.0.0.7:9464", "--metrics-allow-remote"],
    ];
    const req = parseInstall([...agentFlags, "--token-file", "/t"], ctx);
    if (req === "help") throw new Error("help");
    const reader = (p: string) => (p === req.env.SKIPPY_NODE_TOKEN_FILE ? "skn.token\n" : "");
    expect(loadAgentConfig([], req.env, reader)).toEqual(loadAgentConfig([...agentFlags, "--token", "skn.token"], {}, () => ""));
  });

  it("what it installed, started as systemd starts it, heartbeats to the controller", async () => {
    const prefix = join(root, "service");
    expect((await install(joinArgs(prefix))).exitCode).toBe(0);
    const unit = await readFile(join(prefix, "etc/systemd/system/skippy.service"), "utf8");
    const env = parseEnvFile(await readFile(unitSetting(unit, "EnvironmentFile"), "utf8"));
    const [program, ...args] = unitSetting(unit, "ExecStart").split(" ");
    // systemd's environment for a system service: its PATH and the EnvironmentFile, cwd /.
    const child: ChildProcess = spawn(program!, args, { cwd: "/", env: { PATH: SERVICE_PATH, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    const log = createWriteStream(join(root, "service.log"));
    child.stdout!.pipe(log);
    child.stderr!.pipe(log);
    try {
      const node = await waitFor("the installed agent's heartbeat", async () => {
        if (child.exitCode !== null)
          throw new Error(`skippy exited with ${child.exitCode}: ${await readFile(join(root, "service.log"), "utf8")}`);
        const r = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource!;
        return r.currentState?.kind.case === "node" && r.currentState.kind.value.agentVersion ? r.currentState.kind.value : undefined;
      });
      expect(node.agentVersion).toMatch(/^\d+\.\d+\.\d+/);
      expect(node.labels).toEqual({ env: "test" });
    } finally {
      await stopProcess(child);
    }
    expect(child.exitCode).toBe(0);
    expect(await readFile(join(root, "service.log"), "utf8")).not.toContain(token);
  });
});
