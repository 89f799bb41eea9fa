// systemd as PID 1 of a new PID and mount namespace on this machine (its own /run and
// /etc/systemd/system on tmpfs, only empty targets for units, so it starts no getty, udev or
// network of the host): a real service manager for the agent's systemd runner,
// without a container image. What runs inside (the agent, through `nsenter`) sees the namespace's
// pids and systemd's /run/systemd/system, so skippy detects systemd and writes units there.
// SIGKILL to its PID 1 from outside ends the namespace and everything in it.
import { spawn } from "node:child_process";
import { chmod, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { execa } from "execa";
import { waitFor } from "./processes.js";

export interface SystemdNamespace {
  /** systemd's pid as seen from outside. */
  pid: number;
  /** The command prefix that runs a program inside (pid and mount namespaces). */
  launcher: string[];
  /** Runs a command inside; resolves with its output (never rejects on a non-zero exit). */
  run(args: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }>;
  stop(): Promise<void>;
}

// Only the units of two directories exist for it (SYSTEMD_UNIT_PATH): /etc/systemd/system, where
// skippy writes its units, and a directory of empty targets (and system.slice) standing for the
// ones a service's default dependencies name. With the host's units, starting a service pulled in
// sysinit.target and waited for units that never start in a namespace (udev, devices).
const EMPTY_UNITS = [
  "skipper-test",
  "sysinit",
  "basic",
  "multi-user",
  "shutdown",
  "network-online",
  "network",
  "sockets",
  "timers",
  "paths",
  "local-fs",
];
const BOOT = `#!/bin/sh
set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system /run/skipper-units
for t in ${EMPTY_UNITS.join(" ")}; do
  printf '[Unit]\\nDescription=%s (empty, for tests)\\nDefaultDependencies=no\\n' "$t" > /run/skipper-units/$t.target
done
printf '[Unit]\\nDescription=system slice\\nDefaultDependencies=no\\n' > /run/skipper-units/system.slice
mount -t tmpfs tmpfs /etc/systemd/system
export SYSTEMD_UNIT_PATH=/etc/systemd/system:/run/skipper-units
exec /lib/systemd/systemd --system --unit=skipper-test.target --log-target=console
`;

/** Why systemd cannot be PID 1 of a namespace here, or undefined when it can be tried. */
export async function systemdNamespaceUnavailable(): Promise<string | undefined> {
  if (process.getuid?.() !== 0) return "not root";
  for (const bin of ["/lib/systemd/systemd", "/usr/bin/unshare", "/usr/bin/nsenter"]) {
    if ((await execa("test", ["-x", bin], { reject: false })).exitCode !== 0) return `${bin} is missing`;
  }
  return undefined;
}

/** Boots systemd in a new namespace and waits until it says it runs. */
export async function bootSystemd(dir: string): Promise<SystemdNamespace> {
  const script = join(dir, "boot-systemd.sh");
  await writeFile(script, BOOT);
  await chmod(script, 0o755);
  const unshare = spawn("unshare", ["--pid", "--fork", "--mount", "--uts", "--mount-proc", script], { stdio: "ignore", detached: true });
  unshare.unref();
  const pid = await waitFor(
    "systemd to start in its namespace",
    async () => {
      const children = await execa("pgrep", ["-P", String(unshare.pid)], { reject: false });
      const p = Number.parseInt(children.stdout.trim().split("\n")[0] ?? "", 10);
      return p > 0 ? p : undefined;
    },
    20_000,
  );
  const launcher = ["nsenter", "-t", String(pid), "-m", "-p", "--"];
  const run = async (args: string[]) => {
    const r = await execa(launcher[0]!, [...launcher.slice(1), ...args], { reject: false, timeout: 30_000 });
    return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout), stderr: String(r.stderr) };
  };
  await waitFor(
    "systemd to run",
    async () => {
      const r = await run(["systemctl", "is-system-running"]);
      return /^(running|degraded)/.test(r.stdout.trim()) ? true : undefined;
    },
    30_000,
  );
  return {
    pid,
    launcher,
    run,
    stop: async () => {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
      try {
        if (unshare.pid) process.kill(unshare.pid, "SIGKILL");
      } catch {
        // already gone
      }
    },
  };
}
