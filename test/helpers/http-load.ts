// Keep-alive HTTP clients requesting one URL in a loop until stopped, counting what came back:
// the load behind the proxy tests (a switch that drops a request shows as a failure here).
import { Agent, request } from "node:http";

export interface LoadTally {
  ok: number;
  failed: number;
  /** The body of the latest 200 answer, trimmed. */
  last: string;
  /** Bodies of 200 answers, counted. */
  answers: Map<string, number>;
  errors: string[];
}

/** `clients` keep-alive clients on 127.0.0.1:`port` (Host header `host` when given). */
export function httpLoad(port: number, clients: number, host?: string): { tally: LoadTally; stop(): Promise<void> } {
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const tally: LoadTally = { ok: 0, failed: 0, last: "", answers: new Map(), errors: [] };
  let running = true;
  const fail = (why: string) => {
    tally.failed++;
    tally.errors.push(why);
  };
  const one = () =>
    new Promise<void>((resolve) => {
      const req = request({ host: "127.0.0.1", port, path: "/", agent, headers: host ? { host } : {} }, (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        // A response cut off midway (its server stopped under it) is a failed request.
        res.on("close", () => {
          if (res.complete) return;
          fail("response cut off");
          resolve();
        });
        res.on("end", () => {
          if (res.statusCode === 200) {
            tally.ok++;
            tally.last = body.trim();
            tally.answers.set(body, (tally.answers.get(body) ?? 0) + 1);
          } else fail(`HTTP ${res.statusCode}`);
          resolve();
        });
      });
      // A request never answered counts as failed (and does not hang the test).
      req.setTimeout(5000, () => req.destroy(new Error("no answer within 5 s")));
      req.on("error", (e) => {
        fail(e.message);
        resolve();
      });
      req.end();
    });
  const loops = Array.from({ length: clients }, async () => {
    while (running) await one();
  });
  return {
    tally,
    async stop() {
      running = false;
      await Promise.all(loops);
      agent.destroy();
    },
  };
}
