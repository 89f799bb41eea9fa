// A local unix socket that is an SSH node's Docker engine, for the relay's commands: each
// connection to it becomes `docker system dial-stdio` run on the node over the node's master SSH
// connection (ssh-link.ts), its stdin and stdout the connection's two directions. This is what
// the docker CLI's own ssh:// connection helper does, done once for every client: the docker
// CLI, Compose v2 and v1 (whose Python client on this machine cannot dial ssh:// without
// paramiko) and the Engine API calls all reach the node as DOCKER_HOST=unix://<this socket>.
import { spawn } from "node:child_process";
import { rm } from "node:fs/promises";
import net from "node:net";
import type { Logger } from "pino";

export class EngineBridge {
  private server: net.Server | undefined;
  private readonly open = new Set<net.Socket>();

  constructor(
    /** The socket's path. */
    readonly socketPath: string,
    /** ssh's arguments for a remote command (SshLink.args). */
    private readonly sshArgs: (...remote: string[]) => string[],
    private readonly log: Logger,
  ) {}

  /** DOCKER_HOST for commands that should reach the node's engine. */
  get dockerHost(): string {
    return `unix://${this.socketPath}`;
  }

  async start(): Promise<void> {
    await rm(this.socketPath, { force: true });
    const server = net.createServer((socket) => this.relay(socket));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.socketPath, () => resolve());
    });
    this.server = server;
  }

  async stop(): Promise<void> {
    for (const s of this.open) s.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    await rm(this.socketPath, { force: true });
  }

  private relay(socket: net.Socket): void {
    this.open.add(socket);
    const child = spawn("ssh", this.sshArgs("docker", "system", "dial-stdio"), { stdio: ["pipe", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => {
      if (stderr.length < 2000) stderr += d.toString("utf8");
    });
    socket.pipe(child.stdin);
    child.stdout.pipe(socket);
    child.stdin.on("error", () => socket.destroy());
    child.on("error", (e) => {
      this.log.warn({ action: "ssh_bridge", result: "error", metadata: { message: e.message } }, `ssh could not be started: ${e.message}`);
      socket.destroy();
    });
    child.on("exit", (code) => {
      if (code !== 0 && code !== null && stderr.trim() !== "")
        this.log.debug(
          { action: "ssh_bridge", result: "exit", metadata: { code, stderr: stderr.trim().slice(0, 500) } },
          "dial-stdio ended",
        );
      socket.end();
    });
    socket.on("close", () => {
      this.open.delete(socket);
      if (child.exitCode === null) child.kill("SIGTERM");
    });
    socket.on("error", () => child.kill("SIGTERM"));
  }
}
