// Agent-delivered webhooks end to end: the controller (in this process, served over HTTP/2 +
// TLS, its webhook pacing shortened) and two skippy processes, labelled site=a and site=b, both
// reporting webhook.deliver; a real HTTPS receiver on loopback. A subscription with node_selector
// site=b gets its events delivered by the site=b agent: signed (the receiver's check passes with
// the shared secret), each delivery's last_node_id the site=b node, each delivery id seen once by
// the receiver, and its URL in no order, event, file or agent log, not even a piece of it when the
// receiver echoes it across the edge of the kept answer. A receiver answering 500 then
// 200 gets the retry through the agent (set up, listed and switched back with the CLI). A
// subscription whose selector matches no node fails each attempt with the reason, is retried, and
// is dead-lettered at the end of its retry period. Every wait is for observed progress.
import { mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, toJsonString } from "@bufbuild/protobuf";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { NodeLiveness, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WebhookDeliveryState, WebhookService, type WebhookDelivery } from "../gen/skipper/v1/webhook_service_pb.js";
import { WorkOrderSchema, WorkOrderStatus, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { verifySignature } from "../controller/webhooks/webhook-signature.js";
import { run } from "../cli/program.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";
import { filesContaining } from "./helpers/files.js";
import { startAgentProcess, waitFor, type AgentProcess, type ControllerProcess } from "./helpers/processes.js";
import { startReceiver, type Receiver } from "./helpers/webhook-receiver.js";

const SECRET = "agent-delivered-secret-0123456789";
const PATH_TOKEN = "site-b-only-path-27182";
const SITE_A = "wh-site-a-7f3e";
const SITE_B = "wh-site-b-7f3e";
// Retry period 12 s; an unclaimed attempt expires after 5 + 3 s: two attempts, then the dead letter.
const PACING = { pollMs: 20, backoffBaseMs: 50, backoffCapMs: 200, attemptTimeoutMs: 5000, claimMarginMs: 3000, lookBackMs: 2000 };

describe("webhooks delivered by agents (real agent processes)", () => {
  let root: string;
  let tc: TestController;
  let receiver: Receiver | undefined;
  const agents: AgentProcess[] = [];
  const tokens = new Map<string, string>();
  const admin = <S extends Parameters<TestController["client"]>[0]>(s: S) => tc.client(s, { admin: true });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-webhook-agents-"));
    tc = await startController({ webhooks: { ...PACING, retryForMs: 12_000 }, logToFile: true });
    // The agents need only the controller's URL and CA file.
    const controller = { url: tc.url, caFile: join(tc.dataDir, "tls", "ca.crt") } as ControllerProcess;
    expect((await stat(controller.caFile)).isFile()).toBe(true);
    for (const [id, site] of [
      [SITE_A, "a"],
      [SITE_B, "b"],
    ] as const) {
      const { token } = await admin(NodeService).registerNode({ nodeId: id, labels: { site } });
      tokens.set(id, token);
      await mkdir(join(root, id, "work"), { recursive: true });
      agents.push(
        startAgentProcess({
          controller,
          nodeId: id,
          token,
          stateDir: join(root, id, "state"),
          workDir: join(root, id, "work"),
          // A delivery needs no engine.
          dockerHost: "unix:///nonexistent.sock",
        }),
      );
    }
    await waitFor(
      "both agents online with webhook.deliver",
      async () => {
        const res = await admin(ResourceService).listResources({
          resourceType: "node",
          capabilities: ["webhook.deliver"],
          liveness: [NodeLiveness.ONLINE],
        });
        return res.resources.length === 2 ? true : undefined;
      },
      60_000,
    );
  }, 90_000);

  afterAll(async () => {
    await Promise.all(agents.map((a) => a.stop()));
    await tc?.stop();
    await rm(root, { recursive: true, force: true });
  });

  afterEach(async () => {
    await receiver?.close();
    receiver = undefined;
  });

  async function subscribe(r: Receiver, site: string) {
    const created = await admin(WebhookService).createWebhook({
      url: r.url,
      eventTypes: ["resource.created"],
      secret: SECRET,
      caPem: r.caPem,
      allowPrivateNetwork: true,
      nodeSelector: { site },
    });
    expect(created.webhook!.nodeSelector).toEqual({ site });
    return created.webhook!;
  }

  const tenants = async (...ids: string[]) => {
    for (const id of ids) {
      await admin(ResourceService).createResource({
        resourceType: "tenant",
        resource: create(ResourceSchema, {
          id,
          resourceType: "tenant",
          desiredState: { kind: { case: "tenant", value: { displayName: id } } },
        }),
      });
    }
  };

  const deliveriesWhen = (webhookId: string, ok: (ds: WebhookDelivery[]) => boolean, ms = 60_000) =>
    waitFor(
      "webhook deliveries",
      async () => {
        const ds = (await admin(WebhookService).listWebhookDeliveries({ webhookId })).deliveries;
        return ds.length > 0 && ok(ds) ? ds : undefined;
      },
      ms,
      50,
    );

  it("site=b's agent delivers each event once, signed; the URL is in no order, event, file or log", async () => {
    receiver = await startReceiver(`/hooks/${PATH_TOKEN}`);
    const hook = await subscribe(receiver, "b");
    await tenants("wh-agent-1", "wh-agent-2", "wh-agent-3");
    const ds = await deliveriesWhen(hook.id, (x) => x.length === 3 && x.every((d) => d.state === WebhookDeliveryState.DELIVERED));
    for (const d of ds) expect(d, `${d.id}: ${d.lastFailure}`).toMatchObject({ lastNodeId: SITE_B, lastStatus: 200 });
    const byId = new Map<string, number>();
    for (const got of receiver.received) {
      const id = String(got.headers["x-skipper-delivery"]);
      byId.set(id, (byId.get(id) ?? 0) + 1);
      expect(verifySignature(SECRET, String(got.headers["x-skipper-signature"]), got.body, new Date())).toBe(true);
      expect(verifySignature("another-secret-0123456789", String(got.headers["x-skipper-signature"]), got.body, new Date())).toBe(false);
      expect(JSON.parse(got.body)).toMatchObject({ id, event: { type: "resource_created" } });
    }
    expect(Object.fromEntries(byId)).toEqual(Object.fromEntries(ds.map((d) => [d.id, 1])));
    // Each attempt was one order, taken by the site=b node.
    for (const d of ds) {
      const order = (await admin(WorkOrderService).getWorkOrder({ id: `whk-${d.id}-${d.attempts}` })).workOrder!;
      expect(order).toMatchObject({ type: WorkOrderType.DELIVER_WEBHOOK, status: WorkOrderStatus.SUCCESS });
      expect(order.target!.nodeId).toBe(SITE_B);
      expect(order.result!.details!.webhook).toMatchObject({ status: 200, response: "ok" });
      expect(toJsonString(WorkOrderSchema, order)).not.toContain(PATH_TOKEN);
    }
    // The URL goes only to the claim holder while it holds the claim: not to the other node, not after the end.
    const order = `whk-${ds[0]!.id}-${ds[0]!.attempts}`;
    for (const node of [SITE_A, SITE_B]) {
      const asked = tc.client(WorkOrderService, { token: tokens.get(node)! }).getWorkOrderSecrets({ id: order, fencingToken: 1n });
      await expect(asked, node).rejects.toThrow();
    }
    expect(await filesContaining(tc.dataDir, PATH_TOKEN)).toEqual([]);
    expect(await filesContaining(tc.dataDir, SECRET)).toEqual([]);
    expect(await filesContaining(root, PATH_TOKEN)).toEqual([]);
    await admin(WebhookService).deleteWebhook({ id: hook.id });
  });

  it("a receiver echoing the URL across the edge of what is kept leaves no piece of its path anywhere", async () => {
    receiver = await startReceiver(`/hooks/${PATH_TOKEN}`);
    const r = receiver;
    // The agent keeps 1 KiB of the answer: the cut falls inside the path token.
    r.reply = () => `${"e".repeat(1024 - (r.url.length - 12))}${r.url} (echoed)`;
    const hook = await subscribe(r, "b");
    await tenants("wh-agent-echo");
    const [d] = await deliveriesWhen(hook.id, (x) => x[0]!.state === WebhookDeliveryState.DELIVERED);
    // The start of the token the cut would have kept (the node id holds "site-b" too).
    const piece = "b-onl";
    expect(PATH_TOKEN).toContain(piece);
    expect(d).toMatchObject({ lastNodeId: SITE_B, lastStatus: 200 });
    expect(d!.lastResponse).toMatch(/^e+/);
    expect(d!.lastResponse).not.toContain(piece);
    expect(d!.lastResponse).not.toContain("/hooks/");
    const order = (await admin(WorkOrderService).getWorkOrder({ id: `whk-${d!.id}-${d!.attempts}` })).workOrder!;
    expect(order.result!.details!.webhook!.status).toBe(200);
    expect(toJsonString(WorkOrderSchema, order)).not.toContain(piece);
    expect(await filesContaining(tc.dataDir, piece)).toEqual([]);
    expect(await filesContaining(root, piece)).toEqual([]);
    await admin(WebhookService).deleteWebhook({ id: hook.id });
  });

  /** One `skipper` command line, in this process, as the admin; its output once it exited 0. */
  async function skipper(args: string[], input = ""): Promise<{ stdout: string; stderr: string }> {
    const out: string[] = [];
    const err: string[] = [];
    const env = {
      XDG_CONFIG_HOME: join(root, "cli"),
      SKIPPER_SERVER: tc.url,
      SKIPPER_CA_FILE: join(tc.dataDir, "tls", "ca.crt"),
      SKIPPER_TOKEN: ADMIN_TOKEN,
    };
    const code = await run(args, { out: (t) => out.push(t), err: (t) => err.push(t), color: false, env, readStdin: async () => input });
    expect(code, `skipper ${args.join(" ")}\n${out.join("\n")}\n${err.join("\n")}`).toBe(0);
    return { stdout: out.join("\n"), stderr: err.join("\n") };
  }

  it("a receiver answering 500 and then 200 gets the retry, through the same site (set up with the CLI)", async () => {
    receiver = await startReceiver();
    receiver.answer = (n) => (n === 0 ? 500 : 200);
    const ca = join(root, "receiver-ca.crt");
    await writeFile(ca, receiver.caPem);
    const args = ["webhook", "create", receiver.url, "--event", "resource.created", "--receiver-ca-file", ca, "--allow-private-network"];
    const made = await skipper([...args, "--node-selector", "site=b", "--secret-stdin"], SECRET);
    expect(made.stderr).toMatch(/delivered by an agent of a node with site=b\.$/);
    const id = /Webhook (\S+) to /.exec(made.stderr)![1]!;
    expect((await skipper(["webhook", "list"])).stdout).toMatch(
      new RegExp(`^${id}\\s+\\S+\\s+resource\\.created\\s+-\\s+site=b\\s+no\\s+`, "m"),
    );
    await tenants("wh-agent-retry");
    const [d] = await deliveriesWhen(id, (x) => x[0]!.state === WebhookDeliveryState.DELIVERED);
    const table = (await skipper(["webhook", "deliveries", id])).stdout;
    expect(table).toMatch(new RegExp(`^${d!.id}\\s+resource\\.created\\s+DELIVERED\\s+\\d+\\s+200\\s+${SITE_B}\\s+`, "m"));
    // No selector: the controller delivers again.
    expect((await skipper(["webhook", "node-selector", id])).stdout).toBe(
      `Webhook ${id} to ${new URL(receiver.url).host} is delivered by the controller.`,
    );
    expect((await admin(WebhookService).getWebhook({ id })).webhook!.nodeSelector).toEqual({});
    expect(d).toMatchObject({ lastNodeId: SITE_B, lastStatus: 200 });
    expect(d!.attempts).toBeGreaterThanOrEqual(2);
    expect(receiver.received.map((r) => r.status)).toEqual([500, 200]);
    expect(new Set(receiver.received.map((r) => r.headers["x-skipper-delivery"]))).toEqual(new Set([d!.id]));
    const first = (await admin(WorkOrderService).getWorkOrder({ id: `whk-${d!.id}-1` })).workOrder!;
    expect(first.status).toBe(WorkOrderStatus.FAILED);
    expect(first.result!.details!.webhook).toMatchObject({ status: 500, response: "receiver says no (500)" });
    await skipper(["webhook", "delete", id]);
  });

  it("a selector no node matches: each attempt fails saying so, is retried, and the delivery is dead-lettered", async () => {
    receiver = await startReceiver();
    const hook = await subscribe(receiver, "c");
    await tenants("wh-agent-nowhere");
    const [d] = await deliveriesWhen(hook.id, (x) => x[0]!.state === WebhookDeliveryState.DEAD_LETTERED, 90_000);
    expect(d!.attempts).toBeGreaterThanOrEqual(2);
    expect(d!.lastFailure).toBe("no node matching site=c with webhook.deliver took the attempt");
    expect(d!.lastNodeId).toBe("");
    expect(receiver.received).toEqual([]);
    const order = (await admin(WorkOrderService).getWorkOrder({ id: `whk-${d!.id}-1` })).workOrder!;
    expect(order.result!.code).toBe("EXPIRED");
    const status = (await admin(WebhookService).getWebhook({ id: hook.id })).webhook!.status!;
    expect(status).toMatchObject({ deadLettered: 1n, backlog: 0n });
  }, 120_000);
});
