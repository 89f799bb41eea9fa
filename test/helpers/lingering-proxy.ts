// A TCP proxy whose clients can die without the server hearing of it: when a client's side of a
// connection ends (its process killed), the proxy keeps the connection to the target open and
// silent, neither reading nor writing, as a host that lost power or a network that dropped the
// path leaves a half-open connection behind. The server learns of it only when the test calls
// release() (or when the server gives up on the connection itself).
import { once } from "node:events";
import net from "node:net";

export interface LingeringProxy {
  /** The port it listens on (127.0.0.1). */
  readonly port: number;
  /** Connections whose client is gone and whose server side is held open now. */
  readonly lingering: number;
  /** Resets the held server sides, as the network finally would; returns how many. */
  release(): number;
  /**
   * The path drops now for every open connection: nothing more passes either way, and neither
   * side hears of it (both stay open and silent); returns how many connections froze.
   */
  freeze(): number;
  close(): Promise<void>;
}

/** Starts a lingering proxy to `target` on a free loopback port. */
export async function startLingeringProxy(target: { host: string; port: number }): Promise<LingeringProxy> {
  const held = new Set<net.Socket>();
  const open = new Set<net.Socket>();
  const pairs = new Map<net.Socket, net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    open.add(client).add(upstream);
    pairs.set(client, upstream);
    client.on("close", () => pairs.delete(client));
    // Not ended with the client: its end must not reach the server.
    client.pipe(upstream, { end: false });
    upstream.pipe(client);
    const clientGone = () => {
      open.delete(client);
      upstream.unpipe(client);
      client.unpipe(upstream);
      upstream.pause();
      if (!upstream.destroyed) held.add(upstream);
    };
    client.on("error", () => client.destroy()).on("close", clientGone);
    upstream
      .on("error", () => upstream.destroy())
      .on("close", () => {
        held.delete(upstream);
        open.delete(upstream);
        client.destroy();
      });
  });
  await once(server.listen(0, "127.0.0.1"), "listening");
  const { port } = server.address() as net.AddressInfo;
  return {
    port,
    get lingering() {
      return held.size;
    },
    freeze() {
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
      const n = pairs.size;
      pairs.clear();
      return n;
    },
    release() {
      const n = held.size;
      for (const s of [...held]) s.resetAndDestroy();
      held.clear();
      return n;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of [...open, ...held]) s.destroy();
        server.close(() => resolve());
      }),
  };
}
