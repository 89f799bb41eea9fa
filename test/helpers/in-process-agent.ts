// skippy in the test's own process: the real Agent (agent/agent.ts) with its loops, journal and
// runner, on clients the test gives (the in-memory controller's, or a fake's), a host without
// Docker, and executors the test chooses. One place for the AgentConfig a test needs, so the
// cast to the full config (most of it is for main.ts: URLs, credentials, logging) is made once.
import { Writable } from "node:stream";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { pino, type Logger } from "pino";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { AgentBundleService } from "../../gen/skipper/v1/agent_bundle_service_pb.js";
import { EnrollmentService } from "../../gen/skipper/v1/enrollment_service_pb.js";
import { NodeCapabilitiesSchema } from "../../gen/skipper/v1/resource_pb.js";
import { WorkOrderResultSchema, WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { Agent } from "../../agent/agent.js";
import type { AgentTally } from "../../agent/agent-tally.js";
import type { AgentConfig, Transport } from "../../agent/config.js";
import type { ControllerClients } from "../../agent/controller-client.js";
import { executorOf } from "../../agent/executors/executor.js";
import type { ExecutorTable } from "../../agent/executors/executor-table.js";
import { Journal } from "../../agent/journal.js";
import type { InMemoryController } from "./in-memory-controller.js";

export interface InProcessAgentOptions {
  nodeId: string;
  /** Its state directory (the journal); its work directory is work/ below it. */
  dir: string;
  clients: ControllerClients;
  transport: Transport;
  pollIntervalMs: number;
  log: Logger;
  allowCommands?: string[];
  executors?: Partial<ExecutorTable>;
  tally?: AgentTally;
}

/** A running in-process agent; stop() aborts its loops and waits for them to end. */
export interface InProcessAgent {
  agent: Agent;
  stop(): Promise<void>;
}

/** Builds the agent and starts its loops. */
export function startInProcessAgent(o: InProcessAgentOptions): InProcessAgent {
  const config = {
    nodeId: o.nodeId,
    pollIntervalMs: o.pollIntervalMs,
    watch: false,
    transport: o.transport,
    labels: {},
    allowCommands: o.allowCommands ?? [],
    allowProcessSources: [],
    workDir: join(o.dir, "work"),
    stateDir: o.dir,
  } as unknown as AgentConfig;
  const agent = new Agent({
    config,
    clients: o.clients,
    journal: new Journal(o.dir),
    log: o.log,
    probe: async () => ({ capabilities: create(NodeCapabilitiesSchema, { dockerAvailable: false }) }),
    executors: o.executors ?? {},
    observe: async () => [],
    tally: o.tally,
  });
  const halt = new AbortController();
  const running = agent.run(halt.signal);
  return {
    agent,
    stop: async () => {
      halt.abort();
      await running;
    },
  };
}

/** The node's clients on the in-memory controller, with its token (`nodes` replaced when given). */
export function inMemoryNodeClients(
  mem: InMemoryController,
  token: string,
  nodes: ControllerClients["nodes"] = mem.asNode(NodeService, token),
): ControllerClients {
  return {
    nodes,
    orders: mem.asNode(WorkOrderService, token),
    enrollment: mem.asNode(EnrollmentService, token),
    bundles: mem.asNode(AgentBundleService, token),
    useCertificate: () => {},
  };
}

/** An info-level log whose lines the test reads back, parsed. */
export function capturedLog<L = { action?: string; msg?: string }>(): { log: Logger; lines: L[] } {
  const lines: L[] = [];
  const log = pino(
    { level: "info" },
    new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(JSON.parse(chunk.toString("utf8")) as L);
        done();
      },
    }),
  );
  return { log, lines };
}

/** An execute_command executor that succeeds at once without running anything. */
export const commandOk: Partial<ExecutorTable> = {
  [WorkOrderType.EXECUTE_COMMAND]: executorOf("executeCommand", async () => ({
    result: create(WorkOrderResultSchema, { success: true, code: "COMMAND_OK" }),
    services: [],
    composePath: "",
  })),
};
