// A private OpenSSH server on a loopback port, for SSH node tests: its own host key (and a second
// one a test can pin to be refused), one client key allowed in, and the login's environment
// pointing `docker` at the engine the test names (authorized_keys environment=, with
// PermitUserEnvironment), so that engine is reached only through this server; `env` sets more of
// the login's environment (HOME, so a test's "remote" home is a scratch directory). Runs as the
// current user (StrictModes off, keys in a temp dir); undefined when sshd is not installed.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { freePort, waitFor } from "./processes.js";

export const SSHD = "/usr/sbin/sshd";

export interface TestSshd {
  port: number;
  /** The host key it presents ("ssh-ed25519 AAAA…"). */
  hostKey: string;
  /** A host key it does not present. */
  otherHostKey: string;
  /** The client's private key (OpenSSH text), allowed in. */
  clientKey: string;
  stop(): Promise<void>;
}

/** Starts sshd; undefined (with a loud warning) when it cannot run here. */
export async function startSshd(dockerHost: string, env: Record<string, string> = {}): Promise<TestSshd | undefined> {
  if (!existsSync(SSHD)) {
    console.warn(`!!! ${SSHD} is missing (Debian: apt-get install openssh-server): SSH node tests are SKIPPED`);
    return undefined;
  }
  const dir = await mkdtemp(join(tmpdir(), "skipper-sshd-"));
  const keygen = (name: string) => execa("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", join(dir, name)]);
  await Promise.all([keygen("host"), keygen("other-host"), keygen("client")]);
  const pub = async (name: string) => (await readFile(join(dir, `${name}.pub`), "utf8")).trim();
  const environment = Object.entries({ DOCKER_HOST: dockerHost, ...env }).map(([k, v]) => `environment="${k}=${v}"`);
  await writeFile(join(dir, "authorized_keys"), `${environment.join(",")} ${await pub("client")}\n`, { mode: 0o600 });
  const port = await freePort();
  const config = [
    `Port ${port}`,
    "ListenAddress 127.0.0.1",
    `HostKey ${join(dir, "host")}`,
    `AuthorizedKeysFile ${join(dir, "authorized_keys")}`,
    `PidFile ${join(dir, "sshd.pid")}`,
    "StrictModes no",
    "UsePAM no",
    "PasswordAuthentication no",
    "KbdInteractiveAuthentication no",
    "PermitRootLogin prohibit-password",
    "PermitUserEnvironment yes",
  ].join("\n");
  await writeFile(join(dir, "sshd_config"), `${config}\n`);
  // Debian's sshd wants its privilege separation directory even when it runs unprivileged.
  await mkdir("/run/sshd", { recursive: true, mode: 0o755 }).catch(() => undefined);
  const child: ChildProcess = spawn(SSHD, ["-D", "-e", "-f", join(dir, "sshd_config")], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr?.on("data", (d: Buffer) => {
    log += d.toString("utf8");
  });
  await waitFor(`sshd to listen (${log.trim()})`, async () => (/Server listening/.test(log) ? true : undefined), 10_000, 50);
  return {
    port,
    hostKey: await pub("host"),
    otherHostKey: await pub("other-host"),
    clientKey: await readFile(join(dir, "client"), "utf8"),
    async stop() {
      child.kill("SIGTERM");
      await rm(dir, { recursive: true, force: true });
    },
  };
}
