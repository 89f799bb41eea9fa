// The agent's own counters end to end: the built controller and skippy as processes over HTTP/2 +
// TLS. After the agent runs orders, the node shows its counters through the API (REST, as curl
// reads it), the controller's /metrics fleet sums move by what it ran (parsed strictly), the
// agent's loopback /metrics answers with the same totals, and an agent restart (a new boot,
// counts from zero) takes no sum back. Orders are execute_command of `true` and `false`, which
// need no engine. Every wait is for observed progress.
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  E2E_ADMIN_TOKEN,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { rawRequest } from "./helpers/https.js";
import { parsePrometheusText, sampleSum, type Family } from "./helpers/prometheus-text.js";

const NODE = "ac-node-7d3e";
const OK = { type: "execute_command", code: "COMMAND_OK" };
const FAILED = { type: "execute_command", code: "COMMAND_FAILED" };

describe("agent counters (real processes)", () => {
  let root: string;
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let token: string;
  const start = () =>
    startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: process.env.SKIPPER_TEST_DOCKER_HOST ?? "unix:///nonexistent.sock",
      extraArgs: ["--allow-command", "true", "--allow-command", "false", "--metrics-listen", "127.0.0.1:0"],
    });
  /** The controller's /metrics, scraped as the admin and parsed strictly. */
  const scrape = async (): Promise<{ text: string; families: Map<string, Family> }> => {
    const r = await rawRequest(ctl, "GET", "/metrics", { "x-admin-token": E2E_ADMIN_TOKEN });
    expect(r.status).toBe(200);
    return { text: r.body, families: parsePrometheusText(r.body) };
  };
  const agentOrders = async (labels: Record<string, string>) => sampleSum((await scrape()).families, "skipper_agent_orders_total", labels);
  /** The node's counters as GET /v1/resources/node/<id> shows them (JSON, as curl reads it). */
  const shown = async (): Promise<Record<string, unknown> | undefined> => {
    const r = await rawRequest(ctl, "GET", `/v1/resources/node/${NODE}`, { "x-admin-token": E2E_ADMIN_TOKEN });
    expect(r.status).toBe(200);
    const node = (JSON.parse(r.body) as { data: { current_state?: { node?: Record<string, unknown> } } }).data;
    return node.current_state?.node?.agent_counters as Record<string, unknown> | undefined;
  };
  const countOf = (c: Record<string, unknown> | undefined, code: string) =>
    Number((c?.orders as { type: string; code: string; count: string }[] | undefined)?.find((o) => o.code === code)?.count ?? 0);
  /** Runs one execute_command of `program` on the node and waits for its end; returns its result code. */
  const run = async (program: string) => {
    const orders = ctl.admin(WorkOrderService);
    const o = (
      await orders.createWorkOrder({
        type: WorkOrderType.EXECUTE_COMMAND,
        target: { nodeId: NODE },
        action: { kind: { case: "executeCommand", value: { command: { argv: [program] } } } },
      })
    ).workOrder!;
    return waitFor(`order ${o.id} to end`, async () => {
      const now = (await orders.getWorkOrder({ id: o.id })).workOrder!;
      const ended = now.status === WorkOrderStatus.SUCCESS || now.status === WorkOrderStatus.FAILED;
      return ended ? `${now.result?.code}${now.result?.success ? "" : `: ${now.result?.message}`}` : undefined;
    });
  };
  /** The URL of the agent's metrics page, from the last line its log has saying where it listens. */
  const agentMetricsUrl = () =>
    waitFor("the agent's metrics address", async () => {
      const lines = (await readFile(agent.logFile, "utf8")).split("\n").filter((l) => l.includes('"metrics_listen"'));
      return lines.length > 0 ? (JSON.parse(lines.at(-1)!) as { metadata: { url: string } }).metadata.url : undefined;
    });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-counters-"));
    // Commands run in the work directory.
    await mkdir(join(root, "work"));
    ctl = await startControllerProcess({ dataDir: join(root, "data") });
    token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = start();
    // The controller refuses a command off the node's allow-list: wait until a heartbeat said it.
    await waitFor("the agent's allow-list", async () => {
      const r = (await ctl.admin(ResourceService).getResource({ resourceType: "node", id: NODE })).resource;
      const st = r?.currentState?.kind.case === "node" ? r.currentState.kind.value : undefined;
      return st?.capabilities?.allowedCommands.includes("false") ? true : undefined;
    });
  }, 60_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 30_000);

  it("after orders run, the node shows the agent's counters, the fleet sums move, and the agent's own page agrees", async () => {
    const before = await scrape();
    expect(await run("true")).toBe("COMMAND_OK");
    expect(await run("true")).toBe("COMMAND_OK");
    expect(await run("false")).toMatch(/^COMMAND_FAILED/);

    // The heartbeat after them carries them: the node shows them, with the agent's boot.
    const counters = await waitFor("the node's counters", async () => {
      const c = await shown();
      return countOf(c, "COMMAND_OK") === 2 && countOf(c, "COMMAND_FAILED") === 1 ? c : undefined;
    });
    expect(counters.boot_id).toMatch(/^[A-Za-z0-9-]{8,64}$/);
    expect(Number(counters.heartbeats_acknowledged)).toBeGreaterThan(0);
    expect(Date.parse(String(counters.started_at))).toBeLessThanOrEqual(Date.now());

    const { text, families } = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) =>
      sampleSum(families, name, labels) - sampleSum(before.families, name, labels);
    expect(delta("skipper_agent_orders_total", OK)).toBe(2);
    expect(delta("skipper_agent_orders_total", FAILED)).toBe(1);
    expect(sampleSum(families, "skipper_agent_starts_total")).toBe(1);
    expect(families.get("skipper_agent_claims_refused_total")?.type).toBe("counter");
    expect(text).not.toContain(NODE);
    expect(text).not.toContain(String(counters.boot_id));

    // The agent's loopback page: the same totals, in the text format.
    const page = await fetch(await agentMetricsUrl());
    expect(page.status).toBe(200);
    const own = parsePrometheusText(await page.text());
    expect(sampleSum(own, "skippy_orders_total", OK)).toBe(2);
    expect(sampleSum(own, "skippy_orders_total", FAILED)).toBe(1);
    expect(sampleSum(own, "skippy_heartbeats_total")).toBeGreaterThan(0);
  }, 120_000);

  it("an agent restart (a new boot, counts from zero) takes no fleet sum back", async () => {
    const bootBefore = String((await shown())?.boot_id);
    const okBefore = await agentOrders(OK);
    const failedBefore = await agentOrders(FAILED);
    expect(okBefore).toBe(2);
    await agent.stop();
    agent = start();
    // The new boot's first heartbeat: the node's counters start again from zero...
    const fresh = await waitFor("the new boot's counters", async () => {
      const c = await shown();
      return c && c.boot_id !== bootBefore ? c : undefined;
    });
    expect(countOf(fresh, "COMMAND_OK")).toBe(0);
    // ...and the sums stay where they were, with one more start.
    expect(await agentOrders(OK)).toBe(okBefore);
    expect(await agentOrders(FAILED)).toBe(failedBefore);
    expect(sampleSum((await scrape()).families, "skipper_agent_starts_total")).toBe(2);

    expect(await run("true")).toBe("COMMAND_OK");
    await waitFor("the new boot's order in the node's counters", async () =>
      countOf(await shown(), "COMMAND_OK") === 1 ? true : undefined,
    );
    expect(await agentOrders(OK)).toBe(okBefore + 1);
    const own = parsePrometheusText(await (await fetch(await agentMetricsUrl())).text());
    expect(sampleSum(own, "skippy_orders_total", OK)).toBe(1);
  }, 120_000);
});
