// W3C trace context end to end: a controller and an agent as processes on a real engine. A
// `traceparent` sent with Apply (over REST, as curl would) is continued into the work order, the
// events of its whole life (created by the controller, started and finished by the agent's calls),
// the controller's log lines for the agent's calls and the agent's own log lines about it; at a
// loopback OTLP receiver, the agent's span for the order has a client span for each call it made
// for it, each the parent of the controller's span for that call. A change of desired state
// carries its caller's trace into the order the reconciler issues.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { parseTraceparent } from "../common/trace-context.js";
import {
  E2E_ADMIN_TOKEN as ADMIN_TOKEN,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";
import { rawRequest } from "./helpers/https.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
if (!dockerHost) console.warn("!!! trace-context-e2e.test.ts SKIPPED: no Docker engine (see test/global-setup.ts)");

const NODE = "tr-node";
const TENANT = `tr-shop-${RUN_ID}`;
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN = "00f067aa0ba902b7";
// Calls the agent makes for a deploy without secrets, each a client span of its own.
const AGENT_CALLS = [
  "skipper.v1.WorkOrderService/ClaimWorkOrder",
  "skipper.v1.WorkOrderService/ReportWorkOrderResult",
  "skipper.v1.NodeService/ReportResourceState",
];

interface CollectedSpan {
  service: string;
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
}
interface Collector {
  url: string;
  spans: CollectedSpan[];
  stop(): Promise<void>;
}

/** An OTLP/HTTP receiver on loopback that keeps the spans posted to /v1/traces (JSON). */
async function startCollector(): Promise<Collector> {
  const spans: CollectedSpan[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => {
      body += c;
    });
    req.on("end", () => {
      try {
        const doc = JSON.parse(body) as {
          resourceSpans?: {
            resource?: { attributes?: { key: string; value: { stringValue?: string } }[] };
            scopeSpans?: { spans?: { name: string; traceId: string; spanId: string; parentSpanId?: string }[] }[];
          }[];
        };
        for (const rs of doc.resourceSpans ?? []) {
          const service = rs.resource?.attributes?.find((a) => a.key === "service.name")?.value.stringValue ?? "";
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              spans.push({ service, name: s.name, traceId: s.traceId, spanId: s.spanId, parentSpanId: s.parentSpanId ?? "" });
        }
      } catch {
        // Not JSON: nothing kept (the test then waits in vain and says what it missed).
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, spans, stop: () => new Promise((r) => server.close(() => r())) };
}

describe.skipIf(!dockerHost)("trace context (real processes and engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let root: string;
  let collector: Collector;
  const api = () => ctl.admin(ResourceService);
  const orders = () => ctl.admin(WorkOrderService);
  const lines = async (file: string) =>
    (await readFile(file, "utf8"))
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
  const finished = (id: string) =>
    waitFor(
      `order ${id} to finish`,
      async () => {
        const o = (await orders().getWorkOrder({ id })).workOrder!;
        return o.status === WorkOrderStatus.SUCCESS || o.status === WorkOrderStatus.FAILED ? o : undefined;
      },
      120_000,
    );

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-trace-"));
    collector = await startCollector();
    const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_BSP_SCHEDULE_DELAY: "100" };
    ctl = await startControllerProcess({ dataDir: join(root, "data"), env: otel });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agent = startAgentProcess({
      transport: "poll", // expects the unary calls' own log lines in the trace
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "30s"],
      env: otel,
    });
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "tr-web", {
        case: "service",
        value: { tenantId: TENANT, image: "skipper-busybox:local", command: ["sh", "-c", 'trap "exit 0" TERM; sleep 3600 & wait'] },
      }),
    });
    await tenantConverged(api(), TENANT, 120_000);
  }, 180_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    await collector?.stop();
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("a traceparent sent with Apply is continued in the order, its events and both programs' logs", async () => {
    // Over REST, as curl would send it.
    const answer = await rawRequest(
      ctl,
      "POST",
      `/v1/deployments/${TENANT}/apply`,
      { "content-type": "application/json", "x-admin-token": ADMIN_TOKEN, traceparent: `00-${TRACE}-${CLIENT_SPAN}-01` },
      "{}",
    );
    expect([200, 201], answer.body).toContain(answer.status);
    const applied = JSON.parse(answer.body) as { data: Record<string, unknown> };
    const order = fromJson(WorkOrderSchema, applied.data.work_order as JsonValue);
    const carried = parseTraceparent(order.traceparent);
    expect(carried?.traceId).toBe(TRACE);
    // The controller's span, not the client's.
    expect(carried?.spanId).not.toBe(CLIENT_SPAN);

    const done = await finished(order.id);
    expect(done.status).toBe(WorkOrderStatus.SUCCESS);
    const events = (await ctl.admin(EventService).listEvents({ workOrderId: order.id, pageSize: 100 })).events;
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(["work_order_created", "work_order_started", "work_order_succeeded"]));
    // The order's own life (what follows from it, a pass's verdicts, continues the trace when
    // that pass is the one its end caused; a sweep's may come first and carries none).
    for (const e of events.filter((x) => x.type.startsWith("work_order_"))) expect(e.traceId, e.type).toBe(TRACE);

    // The agent's lines about the order, and the controller's lines for the agent's calls about it.
    const agentLines = (await lines(agent.logFile)).filter((l) => l.work_order_id === order.id);
    expect(agentLines.length).toBeGreaterThan(0);
    for (const l of agentLines) expect(l.trace_id, String(l.message)).toBe(TRACE);
    const controllerLines = (await lines(join(root, "controller.out"))).filter(
      (l) => l.trace_id === TRACE && /ClaimWorkOrder|ReportWorkOrderResult/.test(String(l.action)),
    );
    expect(controllerLines.map((l) => l.action)).toEqual(
      expect.arrayContaining([expect.stringMatching(/ClaimWorkOrder/), expect.stringMatching(/ReportWorkOrderResult/)]),
    );
    // Each of those calls is a span of its own in that trace.
    expect(new Set(controllerLines.map((l) => l.span_id)).size).toBe(controllerLines.length);

    // And the spans reached the OTLP collector: the controller's for the Apply and the agent's
    // calls, the agent's for running the order, all in the client's trace.
    const spans = await waitFor(
      "the spans at the collector",
      async () => {
        const mine = collector.spans.filter((s) => s.traceId === TRACE);
        const names = new Set(mine.map((s) => `${s.service} ${s.name}`));
        const wanted = [
          "skipper-controller skipper.v1.DeploymentService/Apply",
          "skipper-controller skipper.v1.WorkOrderService/ReportWorkOrderResult",
          "skipper-controller skipper.v1.NodeService/ReportResourceState",
          "skippy work_order deploy_service",
          ...AGENT_CALLS.map((c) => `skippy ${c}`),
        ];
        return wanted.every((n) => names.has(n)) ? mine : undefined;
      },
      30_000,
    );
    const apply = spans.find((s) => s.name === "skipper.v1.DeploymentService/Apply")!;
    expect(apply.parentSpanId).toBe(CLIENT_SPAN);
    const run = spans.find((s) => s.service === "skippy" && s.name === "work_order deploy_service")!;
    expect(run.parentSpanId).toBe(carried!.spanId);
    // Each call the agent made for the order is a client span under the order's span, and the
    // controller's span for that call is the client span's child: the traceparent sent was its.
    const clientSpans = spans.filter((s) => s.service === "skippy" && s !== run);
    expect(clientSpans.map((s) => s.name)).toEqual(expect.arrayContaining(AGENT_CALLS));
    for (const client of clientSpans) {
      expect(client.parentSpanId, client.name).toBe(run.spanId);
      const served = spans.filter((s) => s.service === "skipper-controller" && s.parentSpanId === client.spanId);
      expect(
        served.map((s) => s.name),
        client.name,
      ).toEqual([client.name]);
    }
    // And no call of the agent's reached the controller under the order's span itself.
    expect(spans.filter((s) => s.service === "skipper-controller" && s.parentSpanId === run.spanId)).toEqual([]);
  }, 180_000);

  it("a change of desired state carries its caller's trace into the order the reconciler issues", async () => {
    const trace = "0af7651916cd43dd8448eb211c80319c";
    const svc = (await api().getResource({ resourceType: "service", id: "tr-web" })).resource!;
    if (svc.desiredState?.kind.case !== "service") throw new Error("not a service");
    svc.desiredState.kind.value.env = { CHANGED: "yes" };
    await api().updateResource(
      { resourceType: "service", id: "tr-web", desiredState: svc.desiredState },
      { headers: { traceparent: `00-${trace}-b7ad6b7169203331-01` } },
    );
    const issued = await waitFor(
      "the reconciler's order",
      async () =>
        (await orders().listWorkOrders({ tenantId: TENANT, pageSize: 100 })).workOrders.find(
          (o) => o.type === WorkOrderType.DEPLOY_SERVICE && parseTraceparent(o.traceparent)?.traceId === trace,
        ),
      60_000,
    );
    expect((await finished(issued.id)).status).toBe(WorkOrderStatus.SUCCESS);
    // A malformed traceparent starts a trace of its own rather than failing the call.
    const odd = await api().getResource({ resourceType: "service", id: "tr-web" }, { headers: { traceparent: "00-zz-not-a-trace-01" } });
    expect(odd.resource?.id).toBe("tr-web");
  }, 180_000);
});
