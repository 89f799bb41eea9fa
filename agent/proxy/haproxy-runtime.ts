// A client of HAProxy's Runtime API (the `stats socket ... level admin` of a running HAProxy, a
// unix socket or a loopback TCP address): the part of the proxy that changes while it serves,
// without a reload. Skippy uses it to put a new container into a backend before the old one leaves,
// and to let the old one go only once HAProxy reports no connection on it:
//
//   add server be/new addr:port   (HAProxy adds it in maintenance)  -> enable server be/new
//   set server be/old state drain (no new connections; those accepted go on)
//   show stat / show servers conn  until the old server has no connection, or the grace is over
//   set server be/old state maint  -> del server be/old
//
// Every command is one connection: HAProxy answers and closes it (non-interactive mode). An
// answer HAProxy gives to a refused command is an error here, with HAProxy's words in it. HAProxy
// ends every answer with a line break, even an empty one ("\n"): no byte at all means the process
// went away before answering (a worker leaving on a reload), which is no success either. Commands
// that say what they did ("New server registered.", "Server deleted.") succeed only when they say it.
import { connect } from "node:net";
import { sleep } from "../engine/sleep.js";

/** A server of a backend as `show stat` reports it. */
export interface ServerStat {
  backend: string;
  server: string;
  /** Current sessions (connections HAProxy holds to it for clients). */
  sessions: number;
  /** "UP", "DOWN", "MAINT", "DRAIN", "no check", … as HAProxy says it. */
  status: string;
  /** Requests (HTTP) or sessions it took in all. */
  total: number;
}

/** Where the Runtime API listens: a unix socket path, or "host:port" on loopback. */
export type RuntimeAddress = { path: string } | { host: string; port: number };

export class ProxyError extends Error {}

/** A proxy change refused for what it asks, not for the proxy's state: asking again will not help (PROXY_REFUSED). */
export class ProxyRefused extends ProxyError {}

/** HAProxy's master answered a reload with a failure (a configuration it cannot load): asking again will not help. */
export class ReloadRefused extends ProxyRefused {}

/** HAProxy's answers meaning a command did nothing. */
const REFUSALS = [
  /^No such /m,
  /^Unknown command/m,
  /^Require /m,
  /^Permission denied/m,
  /[Ee]rror/,
  /^'.*' only supports/m,
  /^Server still has/m,
  /^Already exists/m,
  /cannot (enable|disable|change|remove)/,
  /^Only servers in maintenance mode/m,
];

/** What a command that reports its success answers then. */
const SUCCESS: [RegExp, RegExp][] = [
  [/^add server /, /^New server registered/m],
  [/^del server /, /^Server deleted/m],
];

/** `del server`'s answers while the server is still leaving: asked again, within the timeout. */
const STILL_LEAVING = /^(Server still has connections attached|Only servers in maintenance mode can be deleted)/m;

export class HaproxyRuntime {
  constructor(
    private readonly address: RuntimeAddress,
    private readonly timeoutMs = 5000,
  ) {}

  /** Sends one command and returns HAProxy's answer (throws ProxyError when HAProxy refused it). */
  async command(cmd: string): Promise<string> {
    if (/[\r\n;]/.test(cmd)) throw new ProxyError(`refusing a runtime command with a line break or ';': ${JSON.stringify(cmd)}`);
    const answer = await this.send(`${cmd}\n`);
    if (answer === "") throw new ProxyError(`HAProxy closed the connection without answering "${cmd}"`);
    // What `show` prints is data (its columns may contain any word); only commands are refused.
    if (!cmd.startsWith("show ") && REFUSALS.some((r) => r.test(answer)))
      throw new ProxyError(`HAProxy refused "${cmd}": ${answer.trim()}`);
    const success = SUCCESS.find(([c]) => c.test(cmd))?.[1];
    if (success && !success.test(answer)) throw new ProxyError(`HAProxy did not confirm "${cmd}": ${answer.trim() || "(no answer)"}`);
    return answer;
  }

  /**
   * The master CLI's `reload` (this client talking to the master socket, -S). HAProxy 2.7 and
   * later answer when the new worker started or failed ("Success=1" or "Success=0", then "--"
   * and the start-up messages); 2.6 answers nothing and closes, and the caller learns the outcome
   * from the worker (HostProxy waits for a new one serving the file).
   */
  async reload(): Promise<void> {
    const answer = await this.send("reload\n");
    if (answer === "" || /^Success=1\b/.test(answer)) return;
    const log = answer.replace(/^Success=0\s*(--\s*)?/, "").trim();
    if (/^Success=0\b/.test(answer))
      throw new ReloadRefused(`HAProxy refused the reload: ${log.split("\n").slice(-5).join(" | ") || "(no message)"}`);
    throw new ReloadRefused(`HAProxy's master did not reload: ${answer.trim().slice(0, 300)}`);
  }

  /** The servers of `backend` (its BACKEND summary line left out). */
  async servers(backend: string): Promise<ServerStat[]> {
    return parseStat(await this.command(`show stat ${name(backend)} 4 -1`)).filter((s) => s.backend === backend);
  }

  /** Adds `server` to `backend` at `address:port` and enables it; an existing one at that address is enabled. */
  async addServer(backend: string, server: string, address: string, port: number, opts: { check?: boolean } = {}): Promise<void> {
    const at = `${name(backend)}/${name(server)}`;
    const existing = (await this.servers(backend)).find((s) => s.server === server);
    if (!existing) await this.command(`add server ${at} ${endpoint(address, port)}${opts.check ? " check" : ""}`);
    else {
      // The same name at another address (a container restarted with a new one): moved, not kept.
      const at2 = await this.addressOf(backend, server);
      if (at2 !== endpoint(address, port)) await this.command(`set server ${at} addr ${address} port ${port}`);
    }
    await this.command(`enable server ${at}`);
    if (opts.check) await this.command(`enable health ${at}`);
  }

  /** Stops new connections to `server`; the ones it has go on. */
  async drain(backend: string, server: string): Promise<void> {
    await this.command(`set server ${name(backend)}/${name(server)} state drain`);
  }

  /**
   * Waits until HAProxy holds no connection to `server`, asking every `pollMs`; gives up after
   * `graceMs`. Returns the sessions left (0: drained).
   */
  async waitDrained(backend: string, server: string, opts: { graceMs: number; pollMs?: number; signal?: AbortSignal }): Promise<number> {
    const until = Date.now() + opts.graceMs;
    const signal = opts.signal ?? new AbortController().signal;
    for (;;) {
      const s = (await this.servers(backend)).find((x) => x.server === server);
      const left = s ? s.sessions + (await this.usedConnections(backend, server)) : 0;
      if (left === 0 || Date.now() >= until || signal.aborted) return left;
      await sleep(Math.min(opts.pollMs ?? 100, Math.max(1, until - Date.now())), signal);
    }
  }

  /**
   * Takes `server` out of `backend`: maintenance, its remaining sessions shut (none after a
   * completed drain), then deleted. Gone already: nothing to do.
   */
  async removeServer(backend: string, server: string): Promise<void> {
    const at = `${name(backend)}/${name(server)}`;
    if (!(await this.servers(backend)).some((s) => s.server === server)) return;
    await this.command(`set server ${at} state maint`);
    await this.command(`shutdown sessions server ${at}`);
    // The sessions shut leave asynchronously (and a reload meanwhile may bring the server back out
    // of maintenance): asked again while HAProxy says it is still leaving.
    const until = Date.now() + this.timeoutMs;
    for (;;) {
      const answer = await this.send(`del server ${at}\n`);
      if (/^(Server deleted|No such server)/m.test(answer)) return;
      if (!STILL_LEAVING.test(answer) || Date.now() >= until)
        throw new ProxyError(`HAProxy refused "del server ${at}": ${answer.trim() || "(no answer)"}`);
      if (/maintenance/.test(answer)) await this.command(`set server ${at} state maint`);
      else await this.command(`shutdown sessions server ${at}`);
      await sleep(50, new AbortController().signal);
    }
  }

  // "addr:port" of a server as `show servers state` says it (columns srv_addr and srv_port).
  private async addressOf(backend: string, server: string): Promise<string> {
    const lines = (await this.command(`show servers state ${name(backend)}`)).split("\n");
    const head = (lines.find((l) => l.startsWith("# be_id")) ?? "").replace(/^#\s*/, "").split(" ");
    const row = lines.map((l) => l.split(" ")).find((r) => r[head.indexOf("srv_name")] === server);
    if (!row) return "";
    try {
      return endpoint(row[head.indexOf("srv_addr")] ?? "", Number(row[head.indexOf("srv_port")]));
    } catch {
      return "";
    }
  }

  // Server-side connections in use (keep-alive reuse): `show servers conn` column used_cur.
  private async usedConnections(backend: string, server: string): Promise<number> {
    const lines = (await this.command(`show servers conn ${name(backend)}`)).split("\n");
    const row = lines.find((l) => l.startsWith(`${backend}/${server} `));
    return row ? Number(row.split(/\s+/)[6] ?? 0) || 0 : 0;
  }

  private send(text: string): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = "path" in this.address ? connect(this.address.path) : connect(this.address.port, this.address.host);
      let out = "";
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new ProxyError(`HAProxy's runtime API did not answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      socket.setEncoding("utf8");
      socket.on("data", (d: string) => {
        out += d;
      });
      socket.on("error", (e) => {
        clearTimeout(timer);
        reject(new ProxyError(`HAProxy's runtime API: ${e.message}`));
      });
      socket.on("close", () => {
        clearTimeout(timer);
        resolve(out);
      });
      socket.end(text);
    });
  }
}

/** Rows of `show stat` CSV (its header names the columns). */
export function parseStat(csv: string): ServerStat[] {
  const lines = csv.split("\n").filter((l) => l.trim() !== "");
  const head = (lines[0] ?? "").replace(/^#\s*/, "").split(",");
  const col = (row: string[], n: string) => row[head.indexOf(n)] ?? "";
  return lines.slice(1).flatMap((l) => {
    const row = l.split(",");
    const server = col(row, "svname");
    if (server === "BACKEND" || server === "FRONTEND") return [];
    return [
      {
        backend: col(row, "pxname"),
        server,
        sessions: Number(col(row, "scur")) || 0,
        status: col(row, "status"),
        total: Number(col(row, "stot")) || 0,
      },
    ];
  });
}

// Backend and server names skippy makes: letters, digits, '_', '-', '.'.
function name(n: string): string {
  if (!/^[A-Za-z0-9_.-]{1,127}$/.test(n)) throw new ProxyError(`${JSON.stringify(n)} is not a name HAProxy takes here`);
  return n;
}

function endpoint(address: string, port: number): string {
  if (!/^[0-9a-fA-F.:]+$/.test(address) || !Number.isInteger(port) || port < 1 || port > 65535)
    throw new ProxyError(`${address}:${port} is not an IP address and port`);
  return address.includes(":") ? `[${address}]:${port}` : `${address}:${port}`;
}
