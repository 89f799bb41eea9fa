// A terminal that floods, end to end: the built controller (2 s leases) and skippy as processes on
// a real engine. A terminal runs `yes` and its client stops reading; meanwhile an exec_service
// order that outlives several leases runs on the same node, over the same session. Asserted: the
// order keeps its lease by renewals and succeeds under its first claim; the terminal is still open
// afterwards (its output waited in the container: the relay was not made to hold it, so it was not
// closed for a client that does not read), it streams again once the client reads, and the agent's
// memory stayed bounded meanwhile.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { TerminalService, type AttachRequestSchema, type AttachResponse } from "../gen/skipper/v1/terminal_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! terminal-flow-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const NODE = "flood-host";
const TENANT = `flood-shop-${RUN_ID}`;
const SERVICE = "flood-web";

/** The agent's resident memory (kB), from /proc. */
async function rssKb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
}

describe.skipIf(!dockerHost)("a flooding terminal beside a leased order (real engine, real processes)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-flood-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--lease-duration", "2s"] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      // Terminals ride the session: this test is about sharing it.
      transport: "session",
      extraArgs: ["--ready-timeout", "30s"],
    });
    const api = ctl.admin(ResourceService);
    await api.createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
    await api.createResource({
      resourceType: "service",
      resource: res("service", SERVICE, {
        case: "service",
        value: { tenantId: TENANT, image: "skipper-busybox:local", command: ["sh", "-c", 'trap "exit 0" TERM; sleep 3600 & wait'] },
      }),
    });
    await tenantConverged(api, TENANT, 120_000);
  }, 180_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("`yes` with a client that does not read: the order beside it keeps its lease and succeeds; the terminal lives on, memory bounded", async () => {
    const pid = agent.child.pid!;
    const ac = new AbortController();
    // The client's stream: the open, then nothing until the test ends it.
    let endInput!: () => void;
    const inputEnds = new Promise<void>((r) => (endInput = r));
    const input = (async function* (): AsyncGenerator<MessageInitShape<typeof AttachRequestSchema>> {
      yield { kind: { case: "open", value: { tenantId: TENANT, service: SERVICE, nodeId: NODE, argv: ["yes"] } } };
      await inputEnds;
    })();
    const answers = ctl.admin(TerminalService).attach(input, { signal: ac.signal, timeoutMs: 0 })[Symbol.asyncIterator]();
    const read = async (): Promise<AttachResponse> => {
      const next = await answers.next();
      if (next.done) throw new Error("the terminal ended");
      return next.value;
    };
    expect((await read()).kind.case).toBe("opened");
    let flooded = 0;
    while (flooded === 0) {
      const m = await read();
      if (m.kind.case === "stdout") flooded += m.kind.value.length;
    }
    const rssBefore = await rssKb(pid);
    // From here the client reads nothing; `yes` goes on writing in the container.
    const orders = ctl.admin(WorkOrderService);
    const queued = await orders.createWorkOrder({
      type: WorkOrderType.EXEC_SERVICE,
      target: { tenantId: TENANT, nodeId: NODE },
      action: { kind: { case: "execService", value: { service: SERVICE, argv: ["sleep", "7"] } } },
      timeout: durationFromMs(60_000),
    });
    const done = await waitFor(
      "the order beside the terminal to end",
      async () => {
        const o = (await orders.getWorkOrder({ id: queued.workOrder!.id })).workOrder!;
        return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      90_000,
    );
    // 7 s under 2 s leases: kept only by renewals over the session the terminal floods.
    expect(done.result?.code, done.result?.message).toBe("EXEC_OK");
    expect(done.attempts.map((a) => [a.fencingToken, a.outcome])).toEqual([[1n, "finished"]]);
    const rssGrowthKb = (await rssKb(pid)) - rssBefore;
    expect(rssGrowthKb, `the agent grew by ${rssGrowthKb} kB`).toBeLessThan(64 * 1024);
    // The terminal is still open (not closed for output held beyond its cap): it streams again.
    let more = 0;
    while (more < 4 * 1024 * 1024) {
      const m = await read();
      expect(m.kind.case).toBe("stdout");
      if (m.kind.case === "stdout") more += m.kind.value.length;
    }
    ac.abort();
    endInput();
  }, 180_000);
});
