// A TCP proxy a test controls: a loopback listener that forwards each connection to a target
// (the controller), byte for byte (TLS passes through untouched). cutAll() destroys every open
// connection at once, as a network fault would cut an agent's session mid-stream; new
// connections are forwarded again right away.
import net from "node:net";

export interface TcpProxy {
  /** The port it listens on (127.0.0.1). */
  readonly port: number;
  /** Connections forwarded so far. */
  readonly accepted: number;
  /** Connections open now. */
  readonly open: number;
  /** Destroys every open connection (both sides); returns how many. */
  cutAll(): number;
  close(): Promise<void>;
}

/** Starts a proxy to `target` (host:port) on a free loopback port. */
export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<{ a: net.Socket; b: net.Socket }>();
  let accepted = 0;
  const server = net.createServer((a) => {
    accepted++;
    const b = net.connect(target.port, target.host);
    const pair = { a, b };
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      a.destroy();
      b.destroy();
    };
    a.on("error", drop).on("close", drop);
    b.on("error", drop).on("close", drop);
    a.pipe(b);
    b.pipe(a);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    get accepted() {
      return accepted;
    },
    get open() {
      return pairs.size;
    },
    cutAll() {
      const n = pairs.size;
      for (const { a, b } of [...pairs]) {
        a.resetAndDestroy();
        b.destroy();
      }
      pairs.clear();
      return n;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const { a, b } of pairs) {
          a.destroy();
          b.destroy();
        }
        server.close(() => resolve());
      }),
  };
}
