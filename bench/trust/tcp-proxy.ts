// A TCP proxy on loopback that can partition the network between an agent and the controller.
// Bytes pass through untouched (TLS goes end to end). A partition stops reading on both sides of
// every connection, so nothing crosses in either direction and TCP's flow control stalls the
// senders, as when packets are dropped; connections opened meanwhile are accepted by the kernel
// but go nowhere until the partition heals. Healing lets everything flow again, connections
// included: what each side sent meanwhile arrives late, as after a real partition.
import { connect, createServer, type Socket } from "node:net";

export interface TcpProxy {
  /** The loopback port agents connect to. */
  port: number;
  partitioned(): boolean;
  /** Stops all traffic both ways, on open connections and new ones. */
  partition(): void;
  /** Lets traffic flow again. */
  heal(): void;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  upstream?: Socket;
}

/** Starts a proxy on 127.0.0.1 (a free port) to `target`. */
export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  let cut = false;

  const link = (pair: Pair) => {
    const upstream = connect(target.port, target.host);
    pair.upstream = upstream;
    forward(pair.client, upstream, () => cut);
    forward(upstream, pair.client, () => cut);
    const drop = () => {
      pair.client.destroy();
      upstream.destroy();
      pairs.delete(pair);
    };
    upstream.on("error", drop).on("close", drop);
    pair.client.on("close", drop);
  };

  const server = createServer((client) => {
    const pair: Pair = { client };
    pairs.add(pair);
    client.on("error", () => client.destroy());
    client.on("close", () => {
      pair.upstream?.destroy();
      pairs.delete(pair);
    });
    if (cut) client.pause();
    else link(pair);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  return {
    port: (server.address() as { port: number }).port,
    partitioned: () => cut,
    partition() {
      cut = true;
      for (const p of pairs) {
        p.client.pause();
        p.upstream?.pause();
      }
    },
    heal() {
      cut = false;
      for (const p of pairs) {
        if (!p.upstream) link(p);
        p.client.resume();
        p.upstream!.resume();
      }
    },
    async close() {
      for (const p of pairs) {
        p.client.destroy();
        p.upstream?.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// Copies `from` to `to` by hand rather than with pipe(): pipe() resumes its source when the
// destination drains, which would let bytes through a partition.
function forward(from: Socket, to: Socket, isCut: () => boolean): void {
  from.on("data", (chunk) => {
    if (!to.write(chunk)) from.pause();
  });
  to.on("drain", () => {
    if (!isCut()) from.resume();
  });
  from.on("end", () => to.end());
}
