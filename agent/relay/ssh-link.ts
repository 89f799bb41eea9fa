// One SSH node's connection, as its relay keeps it: OpenSSH's client (ssh -F <its config>, see
// ssh-files.ts) with one master connection that every later command (the engine bridge's, the
// checks) rides on. check() says how the connection is: the master answers (-O check), or a new
// one is opened, under the relay's cap on concurrent handshakes; a failure is classified from
// ssh's own words (host key mismatch, login refused, unreachable), and for a mismatch the key
// the host now presents is fetched (ssh-keyscan) to name both fingerprints.
import { create } from "@bufbuild/protobuf";
import { SshTargetState, SshTargetStatusSchema, type SshTarget, type SshTargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import { runCommand } from "../engine/run-command.js";
import { fingerprintOf, SSH_HOST_ALIAS, type SshFiles } from "./ssh-files.js";

const CHECK_TIMEOUT_MS = 5_000;
const HANDSHAKE_TIMEOUT_MS = 30_000;

/** At most `limit` holders at once; the others wait their turn. */
export class Limiter {
  private active = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  /** Runs `fn` once a place is free. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.active++;
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.active--;
    }
  }
}

export class SshLink {
  private readonly pinned: string;

  constructor(
    private readonly target: SshTarget,
    private readonly relayNodeId: string,
    /** Undefined when the key could not be had (keyProblem says why). */
    private readonly files: SshFiles | undefined,
    private readonly keyProblem: string,
    private readonly handshakes: Limiter,
  ) {
    this.pinned = fingerprintOf(target.hostKey);
  }

  /** ssh's arguments for `remote` run on the node. */
  args(...remote: string[]): string[] {
    if (!this.files) throw new Error("no SSH files for this node");
    return ["-F", this.files.config, SSH_HOST_ALIAS, ...remote];
  }

  /** How the connection is now; opens it when it is not open. */
  async check(): Promise<SshTargetStatus> {
    if (!this.files) return this.status(SshTargetState.KEY_UNAVAILABLE, `the private key is not available: ${this.keyProblem}`);
    const alive = await runCommand("ssh", ["-F", this.files.config, "-O", "check", SSH_HOST_ALIAS], { timeoutMs: CHECK_TIMEOUT_MS });
    if (alive.exitCode === 0) return this.status(SshTargetState.CONNECTED, "");
    const run = await this.handshakes.run(() => runCommand("ssh", this.args("true"), { timeoutMs: HANDSHAKE_TIMEOUT_MS }));
    if (run.exitCode === 0) return this.status(SshTargetState.CONNECTED, "");
    const said = run.timedOut ? "timed out" : lastLines(run.stderr) || `ssh exited ${run.exitCode}`;
    if (/host key verification failed|remote host identification has changed|host key for .* has changed/i.test(said)) {
      const presented = await this.presentedFingerprint();
      return this.status(
        SshTargetState.HOST_KEY_MISMATCH,
        `host key mismatch: ${this.where()} presented ${presented || "a key"} but ${this.pinned} is pinned; the connection was refused`,
        presented,
      );
    }
    if (/permission denied/i.test(said)) return this.status(SshTargetState.AUTH_FAILED, `${this.where()} refused the login: ${said}`);
    return this.status(SshTargetState.UNREACHABLE, `no SSH connection to ${this.where()}: ${said}`);
  }

  /** Ends the master connection (the node is no longer relayed, or its target changed). */
  async close(): Promise<void> {
    if (this.files) await runCommand("ssh", ["-F", this.files.config, "-O", "exit", SSH_HOST_ALIAS], { timeoutMs: CHECK_TIMEOUT_MS });
  }

  private where(): string {
    return `${this.target.user}@${this.target.address}:${this.target.port || 22}`;
  }

  // The key the host presents now, of the pinned key's type.
  private async presentedFingerprint(): Promise<string> {
    const type = this.target.hostKey.trim().split(/\s+/)[0] ?? "";
    const scan = await runCommand(
      "ssh-keyscan",
      ["-T", "10", "-p", String(this.target.port || 22), "-t", keyscanType(type), "--", this.target.address],
      { timeoutMs: 15_000 },
    );
    const line = scan.stdout.split("\n").find((l) => l.trim() !== "" && !l.startsWith("#"));
    return line ? fingerprintOf(line.split(/\s+/).slice(1).join(" ")) : "";
  }

  private status(state: SshTargetState, message: string, presented = ""): SshTargetStatus {
    return create(SshTargetStatusSchema, {
      state,
      message,
      relayNodeId: this.relayNodeId,
      pinnedFingerprint: this.pinned,
      presentedFingerprint: presented,
    });
  }
}

// ssh-keyscan names key types its own way.
function keyscanType(type: string): string {
  if (type === "ssh-ed25519") return "ed25519";
  if (type === "ssh-rsa") return "rsa";
  if (type.startsWith("ecdsa-")) return "ecdsa";
  return type;
}

function lastLines(s: string): string {
  return s.trim().split("\n").slice(-2).join(" ").slice(0, 300);
}
