// The controller as its own process for the benchmarks (as npm start runs it: file store,
// generated TLS), and clients of it over HTTP/2 + TLS. Stop it with node-child.ts's stopChild.
import type { ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { type Client, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { spawnJson } from "./node-child.js";

/**
 * An HTTP/2 + TLS transport to the controller sending `headers` with every call; from
 * `localAddress` when given (a loopback address of its own per simulated host, so the
 * controller's per-address connection cap sees separate hosts, as it would in a real fleet);
 * Connect JSON with `json` (what skippy speaks by default), else Connect's binary encoding;
 * presenting `clientCert` (an enrolled node's certificate and key) in the TLS handshake when given.
 */
export function transportTo(
  url: string,
  ca: string,
  headers: Record<string, string>,
  opts: { localAddress?: string; json?: boolean; clientCert?: { cert: string; key: string } } = {},
): Transport {
  const { localAddress } = opts;
  const auth: Interceptor = (next) => (req) => {
    for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
    return next(req);
  };
  // http2.connect hands its options to tls.connect and on to net.connect, which takes localAddress;
  // the http2 option types leave it out.
  const source = localAddress ? { localAddress } : {};
  return createConnectTransport({
    baseUrl: `${url}/v1`,
    httpVersion: "2",
    useBinaryFormat: !opts.json,
    nodeOptions: { ca, ...source, ...opts.clientCert },
    interceptors: [auth],
  });
}

/** A client of `service` over its own connection. */
export function clientFor<S extends DescService>(service: S, url: string, ca: string, headers: Record<string, string>): Client<S> {
  return createClient(service, transportTo(url, ca, headers));
}

/** The controller started from dist/controller/main.js, its URL and the CA its clients trust. */
export interface Controller {
  child: ChildProcess;
  url: string;
  ca: string;
}

/**
 * Starts the controller on a file store in `dataDir` (or on the store `controllerArgs` name, e.g.
 * `--store postgres://…`), with `env` added to its environment, and waits for its listen line.
 */
export async function startController(
  dist: string,
  dataDir: string,
  adminToken: string,
  nodeArgs: string[] = [],
  controllerArgs: string[] = [],
  env: NodeJS.ProcessEnv = {},
): Promise<Controller> {
  const { child, value: url } = await spawnJson(
    [...nodeArgs, join(dist, "controller", "main.js"), "--data-dir", dataDir, "--listen", "127.0.0.1:0", ...controllerArgs],
    { ...env, SKIPPER_ADMIN_TOKEN: adminToken },
    (l) => (l.action === "listen" ? String((l.metadata as { url?: string } | undefined)?.url ?? "") || undefined : undefined),
  );
  return { child, url, ca: await readFile(join(dataDir, "tls", "ca.crt"), "utf8") };
}
