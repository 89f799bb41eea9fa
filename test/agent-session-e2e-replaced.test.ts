// Two skippy processes with one node's credential, both on sessions, against the real controller
// (in-memory transport: real services, file store, Session): each new session replaces the other
// (REPLACED notice). Neither spins: each waits a jittered backoff that grows, never reset by a
// replaced session, however long it lived.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { startInMemory } from "./helpers/in-memory-controller.js";
import { capturedLog, inMemoryNodeClients, startInProcessAgent } from "./helpers/in-process-agent.js";
import { waitFor } from "./helpers/processes.js";

const NODE = "twin-host";

interface Line {
  action?: string;
  metadata?: { attempt?: number; retry_in_ms?: number };
}

describe("two agents with one credential on sessions", () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it("replace each other with REPLACED notices and back off further each time instead of spinning", async () => {
    const mem = await startInMemory();
    cleanups.push(() => mem.close());
    const token = (await mem.admin(NodeService).registerNode({ nodeId: NODE })).token;
    const start = async (): Promise<Line[]> => {
      const dir = await mkdtemp(join(tmpdir(), "skipper-twin-"));
      const { log, lines } = capturedLog<Line>();
      const agent = startInProcessAgent({
        nodeId: NODE,
        dir,
        clients: inMemoryNodeClients(mem, token),
        transport: "session",
        pollIntervalMs: 1000,
        log,
      });
      cleanups.push(async () => {
        await agent.stop();
        await rm(dir, { recursive: true, force: true });
      });
      return lines;
    };
    const a = await start();
    const b = await start();
    const replaced = (lines: Line[]) => lines.filter((l) => l.action === "session_replaced");
    await waitFor("four replacements", async () => (replaced(a).length + replaced(b).length >= 4 ? true : undefined), 45_000, 50);
    for (const lines of [a, b]) {
      const attempts = replaced(lines).map((l) => l.metadata!.attempt!);
      // Each replaced session counts on: 1, 2, 3... (a reset would start again at 1).
      expect(attempts).toEqual(attempts.map((_, i) => i + 1));
      replaced(lines).forEach((l, i) => expect(l.metadata!.retry_in_ms).toBeLessThanOrEqual(500 * 2 ** i));
    }
    // Sessions opened are bounded by the replacements (no reconnect without a wait).
    const opened = a.concat(b).filter((l) => l.action === "session_opened").length;
    expect(opened).toBeLessThanOrEqual(replaced(a).length + replaced(b).length + 2);
  });
});
