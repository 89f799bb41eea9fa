// The controller as its own process for the trust probes: dist/controller/main.js on a free port
// with generated TLS and the file store, as `npm start` runs it, in a working directory of the
// probe's choosing (so files written outside the data directory can be looked for).
import { spawn, type ChildProcess } from "node:child_process";
import { connectInspector, liveMb, type Inspector } from "./inspector.js";
import { createWriteStream } from "node:fs";
import { mkdir, readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { procStats } from "../measure.js";

const DIST = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..");
export const TRUST_ADMIN_TOKEN = "trust-admin-token-0123456789abcdef";

export interface ControllerProcess {
  child: ChildProcess;
  pid: number;
  url: string;
  port: number;
  dataDir: string;
  ca: string;
  /** Milliseconds from spawn to the listen line. */
  startMs: number;
  admin<S extends DescService>(service: S): Client<S>;
  /** A client with a bearer token (a node's), or none. */
  client<S extends DescService>(service: S, token?: string): Client<S>;
  rssMb(): number;
  /** MB live after a full GC (heap used + external), asked over the inspector: started with `inspect` only. */
  liveMb(): Promise<number>;
  alive(): boolean;
  /** SIGKILL, resolved once it has exited. */
  kill(): Promise<void>;
  stop(): Promise<void>;
}

export interface StartOptions {
  dataDir: string;
  /** The process's working directory (default: the data dir's parent). */
  cwd?: string;
  port?: number;
  args?: string[];
  env?: Record<string, string>;
  /** Start with the V8 inspector on a loopback port (for liveMb). */
  inspect?: boolean;
}

export async function startController(opts: StartOptions): Promise<ControllerProcess> {
  const port = opts.port ?? (await freePort());
  const cwd = opts.cwd ?? resolve(opts.dataDir, "..");
  await mkdir(cwd, { recursive: true });
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [
      ...(opts.inspect ? ["--inspect=127.0.0.1:0"] : []),
      join(DIST, "controller", "main.js"),
      "--data-dir",
      opts.dataDir,
      "--listen",
      `127.0.0.1:${port}`,
      ...(opts.args ?? []),
    ],
    { cwd, env: { ...process.env, ...opts.env, SKIPPER_ADMIN_TOKEN: TRUST_ADMIN_TOKEN }, stdio: ["ignore", "pipe", "pipe"] },
  );
  const out = createWriteStream(join(resolve(opts.dataDir, ".."), `controller-${port}.out`), { flags: "a" });
  child.stderr!.pipe(out);
  // "Debugger listening on ws://127.0.0.1:PORT/ID", on stderr, before the controller listens.
  const inspectorUrl = opts.inspect
    ? new Promise<string>((resolveWs) => {
        createInterface({ input: child.stderr! }).on("line", (line) => {
          const m = /Debugger listening on (ws:\/\/\S+)/.exec(line);
          if (m) resolveWs(m[1]!);
        });
      })
    : undefined;
  let inspector: Promise<Inspector> | undefined;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const url = await new Promise<string>((resolveUrl, reject) => {
    const lines = createInterface({ input: child.stdout! });
    child.once("exit", (code, signal) => reject(new Error(`controller exited (${code ?? signal}) before listening`)));
    lines.on("line", (line) => {
      out.write(`${line}\n`);
      try {
        const l = JSON.parse(line) as { action?: string; metadata?: { url?: string } };
        if (l.action === "listen" && l.metadata?.url) resolveUrl(l.metadata.url);
      } catch {
        // not a log line
      }
    });
  });
  const startMs = performance.now() - started;
  const ca = await readFile(join(opts.dataDir, "tls", "ca.crt"), "utf8");
  const withToken =
    (header: string, value: string): Interceptor =>
    (next) =>
    (req) => {
      req.header.set(header, value);
      return next(req);
    };
  const transport = (interceptors: Interceptor[]) =>
    createConnectTransport({ baseUrl: `${url}/v1`, httpVersion: "2", nodeOptions: { ca }, interceptors });
  const admin = transport([withToken("x-admin-token", TRUST_ADMIN_TOKEN)]);
  const alive = () => child.exitCode === null && child.signalCode === null;
  return {
    child,
    pid: child.pid!,
    url,
    port,
    dataDir: opts.dataDir,
    ca,
    startMs,
    admin: (service) => createClient(service, admin),
    client: (service, token) => createClient(service, transport(token ? [withToken("authorization", `Bearer ${token}`)] : [])),
    rssMb: () => procStats(child.pid!).rssMb,
    liveMb: async () => {
      if (!inspectorUrl) throw new Error("the controller was not started with inspect");
      inspector ??= inspectorUrl.then((u) => connectInspector(u));
      return liveMb(await inspector);
    },
    alive,
    kill: async () => {
      if (alive()) child.kill("SIGKILL");
      await exited;
    },
    stop: async () => {
      void inspector?.then((i) => i.close()).catch(() => undefined);
      if (alive()) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** A TCP port that was free a moment ago on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolvePort(port));
    });
  });
}
