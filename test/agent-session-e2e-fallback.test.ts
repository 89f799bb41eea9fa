// --transport auto against a controller without the Session RPC (an older one): the real
// controller (in-memory transport, real services and file store) whose NodeService client answers
// Session with UNIMPLEMENTED, as an older controller's router does. The agent says so in one log
// line, counts the fallback and runs the order by polling; --transport session never polls.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { AgentTally } from "../agent/agent-tally.js";
import { loadAgentConfig, type AgentConfig, type Transport } from "../agent/config.js";
import { startInMemory, type InMemoryController } from "./helpers/in-memory-controller.js";
import { capturedLog, commandOk, inMemoryNodeClients, startInProcessAgent } from "./helpers/in-process-agent.js";
import { waitFor } from "./helpers/processes.js";

const NODE = "older-ctl-host";

describe("transport auto against a controller without sessions", () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function setUp(transport: Transport) {
    const mem: InMemoryController = await startInMemory();
    const dir = await mkdtemp(join(tmpdir(), "skipper-fallback-"));
    cleanups.push(async () => {
      await mem.close();
      await rm(dir, { recursive: true, force: true });
    });
    const token = (await mem.admin(NodeService).registerNode({ nodeId: NODE })).token;
    const real = mem.asNode(NodeService, token);
    let sessionsAsked = 0;
    // An older controller: every call as today's, but no Session RPC.
    const older = new Proxy(real, {
      get: (target, prop, receiver) =>
        prop === "session"
          ? () => {
              sessionsAsked++;
              throw new ConnectError("HTTP 404: no such method", Code.Unimplemented);
            }
          : Reflect.get(target, prop, receiver),
    }) as Client<typeof NodeService>;
    const { log, lines } = capturedLog();
    const tally = new AgentTally();
    const agent = startInProcessAgent({
      nodeId: NODE,
      dir,
      clients: inMemoryNodeClients(mem, token, older),
      transport,
      pollIntervalMs: 100,
      log,
      allowCommands: ["true"],
      executors: commandOk,
      tally,
    });
    cleanups.push(agent.stop);
    const order = (
      await mem.admin(WorkOrderService).createWorkOrder({
        type: WorkOrderType.EXECUTE_COMMAND,
        target: { nodeId: NODE },
        action: { kind: { case: "executeCommand", value: { command: { argv: ["true"] } } } },
      })
    ).workOrder!;
    return { mem, order, lines, tally, sessionsAsked: () => sessionsAsked };
  }

  it("auto: one line says why, the fallback is counted, and the order runs by polling", async () => {
    const { mem, order, lines, tally, sessionsAsked } = await setUp("auto");
    const done = await waitFor(
      "the order to succeed",
      async () =>
        ((o) => (o?.status === WorkOrderStatus.SUCCESS ? o : undefined))(
          (await mem.admin(WorkOrderService).getWorkOrder({ id: order.id })).workOrder,
        ),
      20_000,
      50,
    );
    expect(done.result?.code).toBe("COMMAND_OK");
    const fallbacks = lines.filter((l) => l.action === "session_fallback");
    expect(fallbacks).toHaveLength(1);
    expect(fallbacks[0]!.msg).toMatch(/no Session RPC/);
    expect(tally.total("sessionFallbacks")).toBe(1);
    expect(sessionsAsked()).toBe(1);
    expect(lines.some((l) => l.action === "claim")).toBe(true);
  });

  it("session: never falls back; it keeps trying the session and the order waits", async () => {
    const { mem, order, lines, tally, sessionsAsked } = await setUp("session");
    await waitFor("three session attempts", async () => (sessionsAsked() >= 3 ? true : undefined), 20_000, 20);
    expect(tally.total("sessionFallbacks")).toBe(0);
    expect(lines.some((l) => l.action === "claim")).toBe(false);
    expect((await mem.admin(WorkOrderService).getWorkOrder({ id: order.id })).workOrder?.status).toBe(WorkOrderStatus.PENDING);
  });
});

describe("choosing the transport", () => {
  const load = (argv: string[], env: NodeJS.ProcessEnv = {}) =>
    loadAgentConfig(["--node-id", "n1", "--state-dir", tmpdir(), "--work-dir", tmpdir(), ...argv], env, () => "") as AgentConfig;

  it("auto by default; the flag, SKIPPY_TRANSPORT or SKIPPER_AGENT_TRANSPORT choose; a flag wins", () => {
    expect(load([]).transport).toBe("auto");
    expect(load(["--transport", "poll"]).transport).toBe("poll");
    expect(load([], { SKIPPY_TRANSPORT: "session" }).transport).toBe("session");
    expect(load([], { SKIPPER_AGENT_TRANSPORT: "poll" }).transport).toBe("poll");
    expect(load(["--transport", "session"], { SKIPPY_TRANSPORT: "poll" }).transport).toBe("session");
  });

  it("an unknown transport is refused, naming the choices", () => {
    expect(() => load(["--transport", "carrier-pigeon"])).toThrow(/--transport must be auto, session or poll, got 'carrier-pigeon'/);
  });
});
