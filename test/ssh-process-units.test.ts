// An SSH node's process modules, the parts that need no SSH: the one quoting helper (its exact
// text, and words that come back from a real sh as they went in), the launch script's exact text,
// the parsing of what the node prints, and the remote scripts themselves run by a real sh with
// a scratch $HOME (as the node's login shell would run them): install, start, a process killed
// behind the supervisor's back started again, stop, the active symlink switched.
import { createHash } from "node:crypto";
import { chmod, lstat, mkdir, mkdtemp, readFile, readdir, readlink, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawn } from "node:child_process";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchDigest } from "../common/process-launch.js";
import { observationOf, parseModules } from "../agent/relay/remote-process-observation.js";
import { REMOTE_PROCESS_BASE, TAIL, envFile, launchScript } from "../agent/relay/remote-process-scripts.js";
import { RemoteProcesses, stdinOf, type ScriptRunner } from "../agent/relay/remote-processes.js";
import { remoteSh, shellQuote } from "../agent/relay/shell-quote.js";
import { superviseOnNode } from "../agent/relay/ssh-process-executors.js";
import { processStartTicks } from "../agent/process/supervisor.js";
import { waitFor } from "./helpers/processes.js";

const noop = () => undefined;
const quietLog = { debug: noop, info: noop, warn: noop, error: noop } as never;
// A zombie (an orphan not reaped yet) is not alive.
const alive = async (pid: number) => (await processStartTicks(pid)) !== undefined;

describe("words for the remote shell", () => {
  it("are single-quoted, an embedded quote closed, escaped and reopened; NUL refused", () => {
    expect(shellQuote("plain")).toBe("'plain'");
    expect(shellQuote("")).toBe("''");
    expect(shellQuote("it's")).toBe("'it'\\''s'");
    expect(() => shellQuote("a\0b")).toThrow(/NUL/);
    expect(remoteSh('echo "$1"', ["it's", "b c"])).toBe(`sh -c 'echo "$1"' sh 'it'\\''s' 'b c'`);
    // A whole script as the node's login shell gets it: the prelude every script starts with, then its own lines.
    expect(remoteSh(TAIL, [REMOTE_PROCESS_BASE, "web"])).toBe(
      [
        `sh -c 'B="$HOME/$1"`,
        "alive() {",
        `  case $1 in '\\'''\\''|*[!0-9]*|0) return 1 ;; esac`,
        `  kill -0 "$1" 2>/dev/null || return 1`,
        `  z=$(cat "/proc/$1/stat" 2>/dev/null) || return 0`,
        `  case \${z##*) } in Z*|X*) return 1 ;; esac`,
        "}",
        "ours() {",
        `  alive "$1" || return 1`,
        `  [ -r "/proc/$1/cmdline" ] || return 0`,
        `  tr '\\''\\000'\\'' '\\'' '\\'' < "/proc/$1/cmdline" | grep -q "^sh .run/supervise.sh $2 \\$"`,
        "}",
        "member() {",
        `  [ "$1" != "$2" ] && alive "$1" || return 1`,
        `  z=$(cat "/proc/$1/stat" 2>/dev/null) || return 0`,
        "  g=$2",
        `  set -- \${z##*) }`,
        `  [ "$3" = "$g" ]`,
        "}",
        `tail -c 2048 "$B/$2/.run/log" 2>/dev/null || true`,
        `' sh '.skippy-ssh/processes' 'web'`,
      ].join("\n"),
    );
  });

  it("come back from a real sh exactly as they went in, whatever they hold", async () => {
    const words = ["a b", "it's", '"dq"', "$HOME", "`id`", "$(id)", "back\\slash", "new\nline", "*", "-n", "; rm -rf /", "ünï"];
    const line = remoteSh('for w in "$@"; do printf "%s\\0" "$w"; done', words);
    // What ssh does with the line: the login shell runs it.
    const r = await execa("sh", ["-c", line]);
    expect(r.stdout.split("\0").slice(0, -1)).toEqual(words);
  });
});

describe("the launch script", () => {
  it("marks the start in the log, enters the active version and execs the program with the launch's environment alone", () => {
    const text = launchScript({
      module: "web",
      version: "2.0.0",
      argv: ["bin/server", "--name", "it's"],
      env: { PORT: "8080", MSG: "a b" },
    });
    expect(text).toBe(
      [
        `echo '--- skipper: starting web 2.0.0 at' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"`,
        "cd active || exit 127",
        `exec env -i "PATH=$PATH" sh -c 'unset PWD; . ../.run/env && exec "$@"' sh './bin/server' '--name' 'it'\\''s'`,
      ].join("\n"),
    );
  });

  it("leaves the environment's values to a file the program's sh sources: export lines, each value one quoted word", () => {
    const launch = { module: "web", version: "2.0.0", argv: ["bin/server"], env: { PORT: "8080", MSG: "it's a\nb" } };
    expect(envFile(launch)).toBe(`export PORT='8080'\nexport MSG='it'\\''s a\nb'\n`);
    expect(envFile({ ...launch, env: {} })).toBe("");
    expect(() => envFile({ ...launch, env: { "A-B": "x" } })).toThrow(/not a usable variable/);
  });
});

describe("what the node prints", () => {
  const sha = "a".repeat(64);
  const digest = "b".repeat(64);
  const printed = [
    "module web",
    "active 2.0.0",
    "installed 10.0.0",
    "installed 2.0.0",
    "installed ../etc",
    "supervisor 41",
    "pid 42",
    "restarts 3",
    "exit 137",
    `meta {"sha256":"${sha}","argv":["bin/server"],"env":{"PORT":"1"},"installedAt":"t"}`,
    `state {"desired":"running","version":"2.0.0","launchDigest":"${digest}","previousVersion":"1.0.0","rollbackOrderId":"","resolvedOffline":true}`,
    "module Bad/Name",
    "active 1.0.0",
    "module idle",
    "supervisor 0",
    "pid 0",
    "state not json",
    "",
  ].join("\n");

  it("is one record per module, names outside their patterns left out, versions in people's order", () => {
    const [web, idle, ...rest] = parseModules(printed);
    expect(rest).toEqual([]);
    expect(web).toMatchObject({
      module: "web",
      active: "2.0.0",
      installed: ["2.0.0", "10.0.0"],
      supervisor: 41,
      pid: 42,
      restarts: 3,
      lastExit: "137",
      meta: { sha256: sha, argv: ["bin/server"], env: { PORT: "1" } },
      state: { desired: "running", launchDigest: digest, previousVersion: "1.0.0", resolvedOffline: true },
    });
    expect(idle).toMatchObject({ module: "idle", active: "", pid: 0, state: { desired: "stopped" } });
  });

  it("is judged as the agent judges its own modules: running, stopped, restarting, exited", () => {
    const [web] = parseModules(printed);
    const o = observationOf(web!);
    expect(o).toMatchObject({
      module: "web",
      activeVersion: "2.0.0",
      previousVersion: "1.0.0",
      installedVersions: ["2.0.0", "10.0.0"],
      state: "running",
      pid: 42,
      activeSha256: sha,
      launchDigest: digest,
      resolvedOffline: true,
    });
    expect(observationOf({ ...web!, pid: 0 }).state).toBe("restarting");
    expect(observationOf({ ...web!, pid: 0, supervisor: 0 }).state).toBe("exited");
    expect(observationOf({ ...web!, pid: 0, state: { ...web!.state, desired: "stopped" } }).state).toBe("stopped");
  });
});

describe("the remote scripts, run by a real sh (a scratch $HOME stands for the node's)", () => {
  let home: string;
  let scratch: string;
  let remote: RemoteProcesses;
  const base = () => join(home, REMOTE_PROCESS_BASE);
  const trees: Record<string, string> = {};
  const meta = (v: string) => ({
    sha256: createHash("sha256").update(v).digest("hex"),
    argv: ["bin/run"],
    env: { WORD: `v${v}` },
    installedAt: "t",
  });
  const launch = (v: string) => ({ module: "job", version: v, argv: ["bin/run"], env: { WORD: `v${v}` } });

  beforeAll(async () => {
    home = await mkdtemp(join(tmpdir(), "skipper-ssh-home-"));
    scratch = await mkdtemp(join(tmpdir(), "skipper-ssh-scratch-"));
    // What the login shell would run for the line ssh sends: sh -c <script> sh <args…>, $HOME the node's.
    const local: ScriptRunner = async (script, args, opts) => {
      const r = await execa("sh", ["-c", remoteSh(script, args)], {
        reject: false,
        env: { HOME: home },
        timeout: opts.timeoutMs,
        ...stdinOf(opts),
      });
      return { exitCode: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr, timedOut: r.timedOut === true };
    };
    remote = new RemoteProcesses(local, scratch);
    for (const v of ["1.0.0", "2.0.0"]) {
      const tree = join(scratch, `tree-${v}`);
      await mkdir(join(tree, "bin"), { recursive: true });
      // Prints its word and the variables it was given, then waits to be killed.
      await writeFile(join(tree, "bin", "run"), `#!/bin/sh\necho "word=$WORD home=\${HOME:-none}"\nexec sleep 600\n`);
      await chmod(join(tree, "bin", "run"), 0o755);
      await symlink("./run", join(tree, "bin", "alias"));
      trees[v] = tree;
    }
  });

  afterAll(async () => {
    await remote.stop("job", 500).catch(() => undefined);
    await rm(home, { recursive: true, force: true });
    await rm(scratch, { recursive: true, force: true });
  });

  it("installs a version beside the others, never over one", async () => {
    await remote.install("job", "1.0.0", trees["1.0.0"]!, meta("1.0.0"));
    await remote.install("job", "2.0.0", trees["2.0.0"]!, meta("2.0.0"));
    expect((await lstat(join(base(), "job", "1.0.0", "bin", "run"))).mode & 0o100).toBe(0o100);
    // A symlink arrives as it was (the archive's renaming does not touch link targets).
    expect(await readlink(join(base(), "job", "1.0.0", "bin", "alias"))).toBe("./run");
    expect(await readFile(join(base(), "job", ".1.0.0.json"), "utf8")).toBe(`${JSON.stringify(meta("1.0.0"))}\n`);
    const m = await remote.inspect("job", "2.0.0");
    expect(m).toMatchObject({ module: "job", active: "", installed: ["1.0.0", "2.0.0"], pid: 0, want: meta("2.0.0") });
    await expect(remote.install("job", "2.0.0", trees["1.0.0"]!, meta("1.0.0"))).rejects.toThrow(/installed on the node already/);
    expect(await remote.inspect("nothing")).toBeUndefined();
  });

  it("starts the active version under its supervisor, starts it again when it is killed, and stops it", async () => {
    await remote.putState("job", {
      desired: "running",
      version: "1.0.0",
      launchDigest: launchDigest(launch("1.0.0")),
      previousVersion: "",
      rollbackOrderId: "",
      resolvedOffline: false,
    });
    const pid = await remote.start(launch("1.0.0"), "run");
    expect(pid).toBeGreaterThan(0);
    expect(await readlink(join(base(), "job", "active"))).toBe("1.0.0");
    const log = join(base(), "job", ".run", "log");
    // Only the launch's environment (and PATH): not the login's HOME.
    await waitFor("the program's line in the log", async () =>
      (await readFile(log, "utf8").catch(() => "")).includes("word=v1.0.0 home=none") ? true : undefined,
    );
    const running = (await remote.observe()).map((m) => observationOf(m));
    expect(running).toMatchObject([
      { module: "job", activeVersion: "1.0.0", state: "running", pid, launchDigest: launchDigest(launch("1.0.0")) },
    ]);

    process.kill(pid, "SIGKILL");
    const again = await waitFor(
      "the supervisor to start it again",
      async () => {
        const m = await remote.inspect("job");
        return m && m.pid > 0 && m.pid !== pid ? m : undefined;
      },
      20_000,
      100,
    );
    // The supervisor saw it die of SIGKILL (128 + 9) and counts one restart.
    expect([again.restarts, again.lastExit]).toEqual([1, "137"]);
    expect(await alive(again.supervisor)).toBe(true);

    expect(await remote.stop("job", 2000)).toBe(again.pid);
    expect([await alive(again.pid), await alive(again.supervisor)]).toEqual([false, false]);
    const stopped = await remote.inspect("job");
    expect(stopped).toMatchObject({ pid: 0, supervisor: 0, restarts: 1 });
    expect(await remote.stop("job", 500)).toBe(0);
    expect((await readFile(log, "utf8")).match(/--- skipper: starting job 1.0.0 at/g)).toHaveLength(2);
  }, 40_000);

  it("pid files naming other programs (pids reused since a reboot) are neither reported nor signalled", async () => {
    const strangers = [0, 1].map(() => spawn("sleep", ["60"], { detached: true, stdio: "ignore" }));
    try {
      const [a, b] = strangers.map((p) => p.pid!) as [number, number];
      const run = join(base(), "job", ".run");
      await mkdir(run, { recursive: true });
      for (const [sup, child] of [
        [a, b],
        [a, a],
      ]) {
        await writeFile(join(run, "supervisor.pid"), `${sup}\n`);
        await writeFile(join(run, "child"), `${child} 0 \n`);
        expect(await remote.inspect("job")).toMatchObject({ supervisor: 0, pid: 0 });
        expect(await remote.stop("job", 500)).toBe(0);
        expect([await alive(a), await alive(b)]).toEqual([true, true]);
      }
    } finally {
      for (const p of strangers) p.kill("SIGKILL");
    }
  });

  it("a pid file naming another program's group leader: only the recorded process is stopped, never that group", async () => {
    // A stranger leading its own process group, with two children in it; the records name the
    // leader as the supervisor and one child as the process.
    const leader = spawn("sh", ["-c", "sleep 61 & echo $!; sleep 62 & echo $!; wait"], {
      detached: true,
      stdio: ["ignore", "pipe", "ignore"],
    });
    let printed = "";
    leader.stdout!.on("data", (b: Buffer) => (printed += b.toString()));
    try {
      const [child, other] = (await waitFor("the stranger's children", async () => {
        const pids = printed.split("\n").filter(Boolean).map(Number);
        return pids.length === 2 ? pids : undefined;
      })) as [number, number];
      const run = join(base(), "job", ".run");
      await mkdir(run, { recursive: true });
      await writeFile(join(run, "supervisor.pid"), `${leader.pid}\n`);
      await writeFile(join(run, "child"), `${child} 0 \n`);
      expect(await remote.inspect("job")).toMatchObject({ supervisor: 0, pid: child });
      expect(await remote.stop("job", 5)).toBe(child);
      expect([await alive(leader.pid!), await alive(other)]).toEqual([true, true]);
      expect(await alive(child)).toBe(false);
    } finally {
      process.kill(-leader.pid!, "SIGKILL");
    }
  });

  it("switches the active symlink in one rename, without starting anything", async () => {
    await remote.switchActive("job", "2.0.0");
    expect(await readlink(join(base(), "job", "active"))).toBe("2.0.0");
    expect((await remote.inspect("job"))?.pid).toBe(0);
    await expect(remote.switchActive("job", "9.9.9")).rejects.toMatchObject({ code: "VERSION_NOT_INSTALLED" });
    expect(await readlink(join(base(), "job", "active"))).toBe("2.0.0");
  });

  it("a process whose supervisor was killed alone is stopped before the module starts again: never two copies", async () => {
    const two = launch("2.0.0");
    await remote.putState("job", { ...(await remote.inspect("job"))!.state, desired: "running", launchDigest: launchDigest(two) });
    const pid = await remote.start(two, "run");
    const supervisor = (await remote.inspect("job"))!.supervisor;
    expect([pid > 0, supervisor > 0]).toEqual([true, true]);
    process.kill(supervisor, "SIGKILL");
    await waitFor("the supervisor gone", async () => ((await alive(supervisor)) ? undefined : true), 10_000, 50);
    // Its process lives on, in the supervisor's group.
    expect(await remote.inspect("job")).toMatchObject({ supervisor: 0, pid });

    await expect(remote.start(two, "run")).rejects.toThrow(/from before still runs on the node/);
    expect(await alive(pid)).toBe(true);

    const [seen] = await superviseOnNode(remote, scratch, quietLog, 2000);
    expect(seen).toMatchObject({ module: "job", state: "running", activeVersion: "2.0.0" });
    expect(seen!.pid).not.toBe(pid);
    expect([await alive(pid), await alive(seen!.pid)]).toEqual([false, true]);
    expect(await remote.stop("job", 2000)).toBe(seen!.pid);
    expect(await alive(seen!.pid)).toBe(false);
  }, 40_000);

  it("the launch's environment reaches the program from a 0600 file, never on a command line (env's, while it starts)", async () => {
    // env is looked up in PATH: this one records its arguments, then runs the real one.
    const bin = join(scratch, "spy-bin");
    const seen = join(scratch, "env-args");
    await mkdir(bin, { recursive: true });
    const realEnv = (await execa("sh", ["-c", "command -v env"])).stdout.trim();
    await writeFile(join(bin, "env"), `#!/bin/sh\nprintf '%s\\n' "$@" >> ${shellQuote(seen)}\nexec ${shellQuote(realEnv)} "$@"\n`);
    await chmod(join(bin, "env"), 0o755);
    const spied: ScriptRunner = async (script, args, opts) => {
      const r = await execa("sh", ["-c", remoteSh(script, args)], {
        reject: false,
        env: { HOME: home, PATH: `${bin}:${process.env.PATH}` },
        timeout: opts.timeoutMs,
        ...stdinOf(opts),
      });
      return { exitCode: r.exitCode ?? -1, stdout: r.stdout, stderr: r.stderr, timedOut: r.timedOut === true };
    };
    const node = new RemoteProcesses(spied, scratch);
    const secret = `s3cret-${process.pid}-value`;
    await node.install("vault", "1.0.0", trees["1.0.0"]!, { ...meta("1.0.0"), env: { WORD: secret } });
    const pid = await node.start({ module: "vault", version: "1.0.0", argv: ["bin/run"], env: { WORD: secret } }, "run");
    try {
      const log = join(base(), "vault", ".run", "log");
      await waitFor("the program's line in the log", async () =>
        (await readFile(log, "utf8").catch(() => "")).includes(`word=${secret} home=none`) ? true : undefined,
      );
      // env ran (with the spy's record of its arguments), and no argument held the value.
      expect(await readFile(seen, "utf8")).toContain("-i\n");
      expect(await readFile(seen, "utf8")).not.toContain(secret);
      for (const p of await readdir("/proc")) {
        if (!/^\d+$/.test(p)) continue;
        const line = await readFile(join("/proc", p, "cmdline"), "utf8").catch(() => "");
        expect(line.includes(secret), `the command line of pid ${p}`).toBe(false);
      }
      expect(await readFile(join("/proc", String(pid), "environ"), "utf8")).toContain(`WORD=${secret}\0`);
      expect((await stat(join(base(), "vault", ".run", "env"))).mode & 0o777).toBe(0o600);
      expect(await readFile(join(base(), "vault", ".run", "launch.sh"), "utf8")).not.toContain(secret);
    } finally {
      await node.stop("vault", 500);
    }
  }, 40_000);
});
