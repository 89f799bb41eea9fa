// The agent killed by its own crash points (SKIPPER_CRASH_AT): between the claim and the journal,
// between the executor and the journaled result, and between the journaled result and the report.
// Orders are execute_command (a shell line that appends to a file, so every run is counted) and
// upload_files, which need no engine: the agent gets an engine address where none listens. Each
// test waits for the agent to die of SIGKILL at its point, starts it again on the same state
// directory and checks that the order ends exactly once, under its first claim (no lease had to
// lapse), and ran once or, where running again converges, was resumed.
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { CrashPointName } from "../common/crash-points.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import type { WorkOrderActionSchema } from "../gen/skipper/v1/order_action_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType, type WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { crashAt, crashOf } from "./helpers/crash.js";
import {
  startAgentProcess,
  startControllerProcess,
  stopProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";

const NODE = "agent-crash-node";
// Leases far longer than a test waits: an order that could only finish after its lease lapsed fails it.
const LEASE = ["--lease-duration", "300s"];
const NO_ENGINE = "unix:///nonexistent/skipper-crash-test/docker.sock";

let root: string;
let ctl: ControllerProcess;
let agent: AgentProcess | undefined;
let token: string;
let counter: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "skipper-crash-agent-"));
  await mkdir(join(root, "work"), { recursive: true });
  counter = join(root, "runs");
  ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: LEASE });
  token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
});

afterEach(async () => {
  if (agent) await stopProcess(agent.child);
  agent = undefined;
  await stopProcess(ctl.child);
  await rm(root, { recursive: true, force: true });
});

function startAgent(point?: CrashPointName): AgentProcess {
  agent = startAgentProcess({
    transport: "poll", // the unary claim's crash points (agent.after-claim); sessions: crash-points-session
    controller: ctl,
    nodeId: NODE,
    token,
    stateDir: join(root, "state"),
    workDir: join(root, "work"),
    dockerHost: NO_ENGINE,
    extraArgs: ["--allow-command", "sh"],
    env: point ? crashAt(point) : {},
  });
  return agent;
}

/** Waits until the controller knows the agent may run sh (its heartbeat), then queues `action`. */
async function queue(type: WorkOrderType, action: MessageInitShape<typeof WorkOrderActionSchema>["kind"]): Promise<WorkOrder> {
  await waitFor("the agent's heartbeat", async () => {
    const n = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource;
    return n?.currentState?.kind.case === "node" && n.currentState.kind.value.capabilities?.allowedCommands.includes("sh")
      ? true
      : undefined;
  });
  return (await ctl.admin(WorkOrderService).createWorkOrder({ type, target: { nodeId: NODE }, action: { kind: action } })).workOrder!;
}

/** A command that counts its runs in `counter`. */
const countedRun = () =>
  queue(WorkOrderType.EXECUTE_COMMAND, { case: "executeCommand", value: { command: { argv: ["sh", "-c", `echo ran >> ${counter}`] } } });

const runs = async () => (await readFile(counter, "utf8").catch(() => "")).split("\n").filter(Boolean).length;

function finished(o: WorkOrder): Promise<WorkOrder> {
  return waitFor(
    `order ${o.id} to finish`,
    async () => {
      const f = (await ctl.admin(WorkOrderService).getWorkOrder({ id: o.id })).workOrder!;
      return [WorkOrderStatus.SUCCESS, WorkOrderStatus.FAILED, WorkOrderStatus.CANCELLED].includes(f.status) ? f : undefined;
    },
    30_000,
  );
}

/** Kills the agent at `point` on the order `drive` queues, starts it again, and returns the order once finished. */
async function crashAndResume(point: CrashPointName, drive: () => Promise<WorkOrder>, ranBeforeRestart: number): Promise<WorkOrder> {
  const ended = crashOf(startAgent(point).child);
  const o = await drive();
  expect(await ended).toMatchObject({ signal: "SIGKILL", point });
  const held = (await ctl.admin(WorkOrderService).getWorkOrder({ id: o.id })).workOrder!;
  expect(held.status).toBe(WorkOrderStatus.RUNNING);
  expect(await runs()).toBe(ranBeforeRestart);
  startAgent();
  const f = await finished(o);
  // One claim, the first: nothing waited for its lease to lapse, nothing was claimed twice.
  expect(f.attempts.map((a) => a.fencingToken)).toEqual([1n]);
  return f;
}

describe("crash points in the agent", () => {
  it("agent.after-claim: the claim granted before the crash is taken up and the command runs once", async () => {
    const f = await crashAndResume("agent.after-claim", countedRun, 0);
    expect(f.status).toBe(WorkOrderStatus.SUCCESS);
    expect(f.result?.code).toBe("COMMAND_OK");
    expect(await runs()).toBe(1);
  }, 90_000);

  it("agent.after-execute: a command that ran before its result was journaled is not run again", async () => {
    const f = await crashAndResume("agent.after-execute", countedRun, 1);
    expect(f.status).toBe(WorkOrderStatus.FAILED);
    expect(f.result?.code).toBe("AGENT_RESTARTED");
    expect(await runs()).toBe(1);
  }, 90_000);

  it("agent.after-execute: an upload whose result was not journaled is run again and converges", async () => {
    const content = new TextEncoder().encode("written once\n");
    const sha256 = createHash("sha256").update(content).digest("hex");
    const upload = () =>
      queue(WorkOrderType.UPLOAD_FILES, { case: "uploadFiles", value: { files: [{ path: "crash/one.txt", content, sha256 }] } });
    const f = await crashAndResume("agent.after-execute", upload, 0);
    expect(f.status).toBe(WorkOrderStatus.SUCCESS);
    expect(f.result?.code).toBe("UPLOAD_OK");
    expect(await readFile(join(root, "work", "files", "crash", "one.txt"), "utf8")).toBe("written once\n");
  }, 90_000);

  it("agent.before-report: the journaled result is reported after the restart and the command does not run again", async () => {
    const f = await crashAndResume("agent.before-report", countedRun, 1);
    expect(f.status).toBe(WorkOrderStatus.SUCCESS);
    expect(f.result?.code).toBe("COMMAND_OK");
    expect(await runs()).toBe(1);
  }, 90_000);
});
