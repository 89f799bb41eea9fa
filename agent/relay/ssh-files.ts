// The files OpenSSH reads for one SSH node, written by its relay under <state-dir>/relay/<node>:
// the private key (0600, in a 0700 directory; never logged), a known_hosts file holding only the
// pinned host key, and a config file that is the only configuration ssh reads (-F: neither the
// user's nor the system's). The config pins what matters: StrictHostKeyChecking yes against that
// known_hosts (a host presenting another key is refused, never learned), only the pinned key's
// algorithm, only this identity (IdentitiesOnly), no agent or forwarding, batch mode (no prompt),
// and one master connection per node that later commands reuse (ControlMaster, ControlPersist).
import { createHash } from "node:crypto";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { SshTarget } from "../../gen/skipper/v1/resource_pb.js";
import { SSH_HOST_KEY, SSH_USER, hostKeyBody, sshAddressProblem } from "../../common/ssh-target-rules.js";

/** The name ssh's config gives the node (its known_hosts entry is filed under it too). */
export const SSH_HOST_ALIAS = "skipper-target";

/** Where one node's SSH files are. */
export interface SshFiles {
  dir: string;
  config: string;
  /**
   * Short enough for a unix socket (the control master's, the engine bridge's): `dir` itself, or,
   * when that is too long, a fresh directory of a name nobody can guess (mkdtemp: 0700, ours).
   */
  socketDir: string;
}

// A unix socket path holds at most 107 bytes; ssh adds 17 to the control path while it binds.
const MAX_SOCKET_DIR = 80;

/** Why the target cannot be written as ssh's files (a sentence), or undefined. Checked again here: ssh reads these. */
export function targetProblem(t: SshTarget): string | undefined {
  const address = sshAddressProblem(t.address);
  if (address) return `address ${address}`;
  if (!SSH_USER.test(t.user)) return `user must match ${SSH_USER.source}`;
  if (t.port > 65535) return "port must be 1..65535";
  if (!SSH_HOST_KEY.test(t.hostKey.trim())) return "host_key is not a public key as ssh-keyscan prints it";
  return undefined;
}

/** Writes the node's key, known_hosts and config under `dir`. */
export async function writeSshFiles(dir: string, t: SshTarget, privateKey: string): Promise<SshFiles> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
  // Never a fixed name under /tmp: another user could create it first and hold our sockets.
  const socketDir = dir.length <= MAX_SOCKET_DIR ? dir : await mkdtemp(join(tmpdir(), "skippy-ssh-"));
  const key = join(dir, "id");
  await rm(key, { force: true });
  await writeFile(key, privateKey.endsWith("\n") ? privateKey : `${privateKey}\n`, { mode: 0o600 });
  const knownHosts = join(dir, "known_hosts");
  await writeFile(knownHosts, `${SSH_HOST_ALIAS} ${hostKeyBody(t.hostKey)}\n`, { mode: 0o600 });
  const config = join(dir, "config");
  await writeFile(config, sshConfig(t, { key, knownHosts, controlPath: join(socketDir, "cm") }), { mode: 0o600 });
  return { dir, config, socketDir };
}

/** Removes the sockets' directory of its own (a mkdtemp one), and with `all` every file written (the key first). */
export async function removeSshFiles(files: SshFiles, opts: { all: boolean }): Promise<void> {
  if (files.socketDir !== files.dir) await rm(files.socketDir, { recursive: true, force: true });
  if (opts.all) await rm(files.dir, { recursive: true, force: true });
}

/** ssh's whole configuration for the node. */
export function sshConfig(t: SshTarget, paths: { key: string; knownHosts: string; controlPath: string }): string {
  const lines = [
    `Host ${SSH_HOST_ALIAS}`,
    `HostName ${t.address}`,
    `Port ${t.port || 22}`,
    `User ${t.user}`,
    `HostKeyAlias ${SSH_HOST_ALIAS}`,
    `HostKeyAlgorithms ${algorithmsOf(t.hostKey)}`,
    `UserKnownHostsFile ${paths.knownHosts}`,
    "GlobalKnownHostsFile /dev/null",
    "StrictHostKeyChecking yes",
    "UpdateHostKeys no",
    "CheckHostIP no",
    `IdentityFile ${paths.key}`,
    "IdentitiesOnly yes",
    "IdentityAgent none",
    "PubkeyAuthentication yes",
    "PasswordAuthentication no",
    "KbdInteractiveAuthentication no",
    "BatchMode yes",
    "ForwardAgent no",
    "ForwardX11 no",
    "ClearAllForwardings yes",
    "ControlMaster auto",
    `ControlPath ${paths.controlPath}`,
    "ControlPersist 300",
    "ConnectTimeout 15",
    "ServerAliveInterval 15",
    "ServerAliveCountMax 3",
    "LogLevel ERROR",
  ];
  return `${lines.map((l, i) => (i === 0 ? l : `  ${l}`)).join("\n")}\n`;
}

// The algorithms that verify a key of the pinned key's type.
function algorithmsOf(hostKey: string): string {
  const type = hostKey.trim().split(/\s+/)[0] ?? "";
  if (type === "ssh-rsa") return "rsa-sha2-512,rsa-sha2-256,ssh-rsa";
  return type;
}

/** A public key's SHA256 fingerprint as ssh-keygen -l prints it ("SHA256:…"); "" when unreadable. */
export function fingerprintOf(publicKey: string): string {
  const blob = publicKey.trim().split(/\s+/)[1];
  if (!blob) return "";
  const digest = createHash("sha256").update(Buffer.from(blob, "base64")).digest("base64");
  return `SHA256:${digest.replace(/=+$/, "")}`;
}
