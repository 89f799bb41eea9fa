// HAProxy in front of several controllers, as the README's "Several controllers behind HAProxy"
// section configures it: TCP mode (TLS passes through, so each controller terminates it and sees
// the agents' client certificates), health checks (GET /v1/health over TLS), leastconn, timeouts
// fit for long-lived streams, and shutdown-sessions so a dead controller's agents move at once.
// Started in the foreground (-db) on a free loopback port; stats on a private unix socket.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createWriteStream } from "node:fs";
import { writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import { freePort, stopProcess, waitFor } from "./processes.js";

/** The haproxy binary on PATH (or in /usr/sbin), or undefined when it is not installed. */
export function haproxyBinary(): string | undefined {
  for (const bin of ["haproxy", "/usr/sbin/haproxy", "/usr/local/sbin/haproxy"]) {
    const r = spawnSync(bin, ["-v"], { encoding: "utf8" });
    if (r.status === 0) return bin;
  }
  return undefined;
}

/**
 * The configuration an operator would use; `backends` are the controllers' HOST:PORT, `caFile` the
 * CA that signed their (shared) certificate, for the health checks.
 */
export function haproxyConfig(opts: { listen: string; backends: string[]; caFile: string; statsSocket?: string }): string {
  return [
    "global",
    "  maxconn 4096",
    ...(opts.statsSocket ? [`  stats socket ${opts.statsSocket} mode 600 level admin`] : []),
    "",
    "defaults",
    // TCP: haproxy forwards the TLS bytes untouched, so each controller terminates TLS with its own
    // (shared) certificate and sees each agent's client certificate itself.
    "  mode tcp",
    "  timeout connect 5s",
    // An agent holds one HTTP/2 connection for hours with long-lived streams on it (its order watch
    // or session, kept alive every 45 s); an idle timeout shorter than that would cut them. The
    // controller closes truly idle connections itself (--request-idle-timeout,
    // --session-idle-timeout), so haproxy's timeouts only bound dead peers.
    "  timeout client 1h",
    "  timeout server 1h",
    // A connection refused by a controller that has just died (not yet marked down) is retried on
    // another one.
    "  retries 3",
    "  option redispatch",
    "",
    "frontend skipper",
    `  bind ${opts.listen}`,
    "  default_backend controllers",
    "",
    "backend controllers",
    // Agents hold connections for long: spread them by how many each controller holds.
    "  balance leastconn",
    // Health: GET /v1/health over TLS every 500 ms, answered within 2 s (a bare TCP connect would
    // pass on a hung controller: the kernel accepts for it); two failures mark it down, then
    // shutdown-sessions closes the agents' connections through it so they reconnect to another at once.
    "  option httpchk GET /v1/health",
    "  http-check expect status 200",
    "  timeout check 2s",
    `  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions check-ssl verify required ca-file ${opts.caFile}`,
    ...opts.backends.map((b, i) => `  server controller-${i} ${b} check`),
    "",
  ].join("\n");
}

export interface HaproxyProcess {
  child: ChildProcess;
  /** https://127.0.0.1:PORT: what agents are given as --controller. */
  url: string;
  /** Current sessions per server (controller-0, controller-1, ...), and each server's status (UP/DOWN). */
  stats(): Promise<Map<string, { sessions: number; status: string }>>;
  stop(): Promise<void>;
}

/** Starts haproxy in `dir` (config, log, stats socket) in front of `backends` (HOST:PORT each). */
export async function startHaproxy(bin: string, dir: string, backends: string[], caFile: string): Promise<HaproxyProcess> {
  const port = await freePort();
  const statsSocket = join(dir, "haproxy.sock");
  const configFile = join(dir, "haproxy.cfg");
  await writeFile(configFile, haproxyConfig({ listen: `127.0.0.1:${port}`, backends, caFile, statsSocket }));
  const child = spawn(bin, ["-db", "-f", configFile], { stdio: ["ignore", "pipe", "pipe"] });
  const out = createWriteStream(join(dir, "haproxy.out"), { flags: "a" });
  child.stdout!.pipe(out);
  child.stderr!.pipe(out);
  const stats = async () => {
    const csv = await socketCommand(statsSocket, "show stat\n");
    const lines = csv.split("\n").filter((l) => l.length > 0);
    const header = lines[0]!.replace(/^# /, "").split(",");
    const col = (name: string) => header.indexOf(name);
    const result = new Map<string, { sessions: number; status: string }>();
    for (const l of lines.slice(1)) {
      const f = l.split(",");
      if (f[col("pxname")] !== "controllers" || f[col("svname")] === "BACKEND") continue;
      result.set(f[col("svname")]!, { sessions: Number(f[col("scur")]), status: f[col("status")]! });
    }
    return result;
  };
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code) => reject(new Error(`haproxy exited with ${code}: see ${join(dir, "haproxy.out")}`))),
  );
  exited.catch(() => {});
  // Ready when its stats socket answers (it binds the frontend before it opens the socket).
  await Promise.race([waitFor("haproxy's stats socket", () => stats().catch(() => undefined), 10_000, 50), exited]);
  return { child, url: `https://127.0.0.1:${port}`, stats, stop: () => stopProcess(child) };
}

function socketCommand(path: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const s = connect(path, () => s.end(command));
    s.on("data", (d: Buffer) => chunks.push(d));
    s.once("error", reject);
    s.once("close", () => resolve(Buffer.concat(chunks).toString("utf8")));
  });
}

/** The host's HAProxy as skippy's proxy tests run it: master-worker, skippy's file loaded after the host's own. */
export interface HaproxyMaster {
  child: ChildProcess;
  /** The worker's Runtime API (`stats socket … level admin`): skippy's --proxy-runtime. */
  runtime: string;
  /** The master CLI (-S): skippy's --proxy-master. */
  master: string;
  /** skippy's file (--proxy-config), empty until skippy first writes it. */
  configPath: string;
  stop(): Promise<void>;
}

/**
 * Starts HAProxy in master-worker mode in `dir` as the README's "Updates nobody notices" section
 * runs it (`-W -S master.sock -f base.cfg -f skipper.cfg`, base.cfg holding global with the
 * admin socket, and defaults); resolves once the worker's runtime socket answers.
 */
export async function startHaproxyMaster(bin: string, dir: string, opts: { timeoutS?: number } = {}): Promise<HaproxyMaster> {
  const runtime = join(dir, "admin.sock");
  const master = join(dir, "master.sock");
  const configPath = join(dir, "skipper.cfg");
  const t = opts.timeoutS ?? 30;
  const base = [
    "global",
    `  stats socket ${runtime} mode 600 level admin expose-fd listeners`,
    "defaults",
    "  timeout connect 2s",
    `  timeout client ${t}s`,
    `  timeout server ${t}s`,
    "",
  ];
  await writeFile(join(dir, "base.cfg"), base.join("\n"));
  // skippy's file does not exist before its first write: HAProxy starts with the host's alone.
  await writeFile(configPath, "");
  const child = spawn(bin, ["-W", "-db", "-S", master, "-f", join(dir, "base.cfg"), "-f", configPath], { stdio: "ignore" });
  const exited = new Promise<never>((_, reject) => child.once("exit", (code) => reject(new Error(`haproxy exited with ${code}`))));
  exited.catch(() => {});
  await Promise.race([
    waitFor(
      "haproxy's runtime socket",
      async () => ((await socketCommand(runtime, "show info\n").catch(() => "")).includes("Pid:") ? true : undefined),
      10_000,
      50,
    ),
    exited,
  ]);
  return { child, runtime, master, configPath, stop: () => stopProcess(child) };
}
