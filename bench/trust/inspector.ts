// The memory a controller process holds, as opposed to what its RSS shows: RSS also counts
// garbage not yet collected (a thousand refused 16 KiB bodies are 16 MB of it until the next major
// GC), and so swings 0-36 MB for the same case. Here the probe asks the process itself, over the
// V8 inspector of a controller started with --inspect=127.0.0.1:0, to run a full GC and report
// what is still live (heap used + external, Buffers included). A minimal WebSocket client, enough
// for the DevTools protocol's few calls; used by the trust probes only.
import { randomBytes } from "node:crypto";
import net from "node:net";

/** One inspector session: a call returns the result of one DevTools protocol method. */
export interface Inspector {
  call(method: string, params?: object): Promise<unknown>;
  close(): void;
}

/** Connects to `wsUrl` (ws://127.0.0.1:PORT/ID, as `Debugger listening on` prints it). */
export function connectInspector(wsUrl: string, timeoutMs = 10_000): Promise<Inspector> {
  const url = new URL(wsUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no inspector answer from ${wsUrl} within ${timeoutMs} ms`));
    }, timeoutMs);
    const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
    let nextId = 1;
    let buffer = Buffer.alloc(0);
    let upgraded = false;
    socket.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
      for (const p of pending.values()) p.reject(e);
    });
    socket.on("connect", () => {
      const key = randomBytes(16).toString("base64");
      socket.write(
        `GET ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      );
    });
    socket.on("data", (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      if (!upgraded) {
        const end = buffer.indexOf("\r\n\r\n");
        if (end < 0) return;
        if (!/^HTTP\/1\.1 101/.test(buffer.toString("latin1", 0, 12))) {
          socket.destroy();
          reject(new Error(`the inspector refused the upgrade: ${buffer.toString("latin1", 0, end)}`));
          return;
        }
        upgraded = true;
        buffer = buffer.subarray(end + 4);
        clearTimeout(timer);
        resolve({ call, close: () => socket.destroy() });
      }
      // Server frames are unmasked: FIN/opcode, length (7, 16 or 64 bits), payload.
      for (;;) {
        if (buffer.length < 2) return;
        let length = buffer[1]! & 0x7f;
        let offset = 2;
        if (length === 126) {
          if (buffer.length < 4) return;
          length = buffer.readUInt16BE(2);
          offset = 4;
        } else if (length === 127) {
          if (buffer.length < 10) return;
          length = Number(buffer.readBigUInt64BE(2));
          offset = 10;
        }
        if (buffer.length < offset + length) return;
        const opcode = buffer[0]! & 0x0f;
        const payload = buffer.subarray(offset, offset + length);
        buffer = buffer.subarray(offset + length);
        if (opcode !== 1) continue;
        const message = JSON.parse(payload.toString("utf8")) as { id?: number; result?: unknown; error?: { message: string } };
        const p = message.id === undefined ? undefined : pending.get(message.id);
        if (!p) continue;
        pending.delete(message.id!);
        if (message.error) p.reject(new Error(message.error.message));
        else p.resolve(message.result);
      }
    });
    const call = (method: string, params: object = {}): Promise<unknown> =>
      new Promise((res, rej) => {
        const id = nextId++;
        pending.set(id, { resolve: res, reject: rej });
        const data = Buffer.from(JSON.stringify({ id, method, params }));
        // Client frames are masked.
        const mask = randomBytes(4);
        const head =
          data.length < 126
            ? Buffer.from([0x81, 0x80 | data.length])
            : data.length < 65536
              ? Buffer.from([0x81, 0x80 | 126, data.length >> 8, data.length & 0xff])
              : Buffer.concat([Buffer.from([0x81, 0x80 | 127]), bigLength(data.length)]);
        const masked = Buffer.from(data.map((b, i) => b ^ mask[i % 4]!));
        socket.write(Buffer.concat([head, mask, masked]));
      });
  });
}

function bigLength(n: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
}

/** MB the process holds after a full GC: V8 heap used plus external memory (Buffers). */
export async function liveMb(inspector: Inspector): Promise<number> {
  await inspector.call("HeapProfiler.collectGarbage");
  const result = (await inspector.call("Runtime.evaluate", {
    expression: "JSON.stringify(process.memoryUsage())",
    returnByValue: true,
  })) as { result: { value: string } };
  const m = JSON.parse(result.result.value) as { heapUsed: number; external: number };
  return (m.heapUsed + m.external) / (1024 * 1024);
}
