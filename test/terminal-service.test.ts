// TerminalService.Attach on the controller's side, with a test standing in for the node's agent on
// its Session stream (no engine): the terminal's one audit entry, written once its slot is held;
// a node with its share open refused before anything is recorded; the tenant's placement (node
// pool, a scoped caller's nodes) holding for terminals as for exec orders; a terminal ending with
// the credential that opened it; and, called directly, a client that leaves before the relay
// starts freeing its slot and closing the terminal on the agent.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError, createContextValues, type HandlerContext } from "@connectrpc/connect";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { AuditService } from "../gen/skipper/v1/audit_service_pb.js";
import { ApiErrorSchema } from "../gen/skipper/v1/envelope_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService, type SessionExecOpen, type SessionResponse } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { AttachRequestSchema, TerminalService, type AttachRequest, type AttachResponse } from "../gen/skipper/v1/terminal_service_pb.js";
import { callInfoKey, type CallInfo } from "../controller/base/context.js";
import { actorOf } from "../controller/auth/actor.js";
import { CredentialEnds } from "../controller/auth/credential-ends.js";
import { SessionTerminals, MAX_TERMINALS_PER_NODE } from "../controller/dispatch/session-terminals.js";
import { DEFAULT_RELAY_LIMITS } from "../controller/dispatch/terminal-relay.js";
import type { ServiceDeps } from "../controller/services/deps.js";
import { terminalService } from "../controller/services/terminal-service.js";
import { startController, type TestController } from "./helpers/controller.js";
import { openSession, type TestSession } from "./helpers/session-client.js";

let tc: TestController;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  tc = await startController();
  const nodes = tc.client(NodeService, { admin: true });
  for (const [nodeId, pool] of [
    ["term-a", "a"],
    ["term-b", "b"],
    ["term-full", "a"],
    ["term-rot", "a"],
  ] as const) {
    tokens[nodeId] = (await nodes.registerNode({ nodeId, labels: { pool } })).token;
  }
  const resources = tc.client(ResourceService, { admin: true });
  // "pooled" may run on nodes labelled pool=a only (an admin's policy); "loose" has no pool and runs nowhere.
  for (const [id, policy] of [
    ["pooled", { nodeSelector: { pool: "a" } }],
    ["loose", undefined],
  ] as const) {
    await resources.createResource({
      resourceType: "tenant",
      resource: create(ResourceSchema, { id, resourceType: "tenant", desiredState: { kind: { case: "tenant", value: { policy } } } }),
    });
  }
});
afterAll(async () => {
  await tc?.stop();
});

/** The node's agent, as far as terminals go: its session, welcomed. */
async function agentOf(nodeId: string): Promise<TestSession> {
  const s = openSession(tc.client(NodeService, { token: tokens[nodeId] }));
  s.send({ case: "hello", value: { nodeId, agentVersion: "test", journalWorkOrderIds: [] } });
  await s.next("the welcome", (m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
  return s;
}

const execOpen = (m: SessionResponse) => (m.kind.case === "execOpen" ? m.kind.value : undefined);
const closeOf = (execId: string) => (m: SessionResponse) =>
  m.kind.case === "execInput" && m.kind.value.execId === execId && m.kind.value.close ? true : undefined;
const apiCode = (e: unknown) => ConnectError.from(e).findDetails(ApiErrorSchema)[0]?.code;

/** An Attach call the test holds open: its answers as they come, and how it ended. */
function attach(client: ReturnType<typeof tc.client<typeof TerminalService>>, open: { tenantId: string; nodeId: string }) {
  const ac = new AbortController();
  const answers: AttachResponse[] = [];
  let stopInput!: () => void;
  const inputEnds = new Promise<void>((r) => (stopInput = r));
  const input = (async function* (): AsyncGenerator<MessageInitShape<typeof AttachRequestSchema>> {
    yield { kind: { case: "open", value: { service: "web", argv: ["sh"], ...open } } };
    await inputEnds;
  })();
  const ended = (async () => {
    try {
      for await (const a of client.attach(input, { signal: ac.signal, timeoutMs: 0 })) answers.push(a);
      return undefined;
    } catch (e) {
      return e;
    } finally {
      stopInput();
    }
  })();
  return { answers, ended, abort: () => ac.abort() };
}

const auditOf = async () => (await tc.client(AuditService, { admin: true }).listAuditEntries({ pageSize: 1000 })).entries;

describe("a terminal's audit entry and slot", () => {
  it("an opened terminal has one audit entry for its call, naming it; exec_open offers the output window", async () => {
    const agent = await agentOf("term-a");
    const before = (await auditOf()).filter((e) => e.rpc === "skipper.v1.TerminalService/Attach").length;
    const call = attach(tc.client(TerminalService, { admin: true }), { tenantId: "pooled", nodeId: "term-a" });
    const opened: SessionExecOpen = await agent.next("exec_open", execOpen);
    expect(opened.outputWindow).toBe(DEFAULT_RELAY_LIMITS.outputWindowBytes);
    agent.send({ case: "execOutput", value: { execId: opened.execId, exited: { code: 5 } } });
    expect(await call.ended).toBeUndefined();
    expect(call.answers.map((a) => a.kind.case)).toEqual(["opened", "exitCode"]);
    const entries = (await auditOf()).filter((e) => e.rpc === "skipper.v1.TerminalService/Attach");
    expect(entries.length - before).toBe(1);
    expect(entries.at(-1)).toMatchObject({ target: `terminal/${opened.execId}`, tenantId: "pooled", outcome: "OK" });
    agent.close();
  });

  it(`a node with ${MAX_TERMINALS_PER_NODE} terminals open refuses one more before anything is recorded of it`, async () => {
    const agent = await agentOf("term-full");
    const client = tc.client(TerminalService, { admin: true });
    const calls = [];
    for (let i = 0; i < MAX_TERMINALS_PER_NODE; i++) {
      calls.push(attach(client, { tenantId: "pooled", nodeId: "term-full" }));
      await agent.next(`exec_open ${i + 1}`, () =>
        agent.received.filter((r) => r.kind.case === "execOpen").length > i ? true : undefined,
      );
    }
    const opened = async () =>
      (await tc.client(EventService, { admin: true }).listEvents({ type: "terminal_opened", pageSize: 1000 })).events.filter(
        (e) => e.nodeId === "term-full",
      ).length;
    expect(await opened()).toBe(MAX_TERMINALS_PER_NODE);
    const refused = attach(client, { tenantId: "pooled", nodeId: "term-full" });
    expect(apiCode(await refused.ended)).toBe("RESOURCE_EXHAUSTED");
    expect(await opened()).toBe(MAX_TERMINALS_PER_NODE);
    const entries = (await auditOf()).filter((e) => e.rpc === "skipper.v1.TerminalService/Attach");
    // The refusal's own entry (the boundary's, naming the tenant), and no OK entry for it.
    expect(entries.filter((e) => e.outcome === "RESOURCE_EXHAUSTED")).toHaveLength(1);
    expect(entries.filter((e) => e.outcome === "OK" && e.target === "")).toHaveLength(0);
    for (const c of calls) c.abort();
    agent.close();
  });
});

describe("a terminal's node is held to the tenant's placement, as an exec order's", () => {
  it("a node outside the tenant's node pool is refused FORBIDDEN (for the admin too), and nothing opens", async () => {
    const agent = await agentOf("term-b");
    const call = attach(tc.client(TerminalService, { admin: true }), { tenantId: "pooled", nodeId: "term-b" });
    const e = await call.ended;
    expect(apiCode(e)).toBe("FORBIDDEN");
    expect(ConnectError.from(e).rawMessage).toContain("outside tenant pooled's node pool");
    expect(agent.received.some((m) => m.kind.case === "execOpen")).toBe(false);
    agent.close();
  });

  it("an operator scoped to a tenant without a pool cannot open one on a node the tenant does not run on", async () => {
    const agent = await agentOf("term-a");
    const key = await tc.client(AccessService, { admin: true }).createApiKey({
      name: "loose-operator",
      role: Role.OPERATOR,
      scope: { tenantIds: ["loose"] },
    });
    const call = attach(tc.client(TerminalService, { token: key.secret }), { tenantId: "loose", nodeId: "term-a" });
    const e = await call.ended;
    expect(apiCode(e)).toBe("FORBIDDEN");
    expect(ConnectError.from(e).rawMessage).toContain("does not run on node term-a");
    expect(agent.received.some((m) => m.kind.case === "execOpen")).toBe(false);
    // The same refusal an exec_service order gets.
    agent.close();
  });
});

describe("a terminal ends with its credential", () => {
  it("the caller's API key revoked: the call ends UNAUTHORIZED and the agent is told to close the terminal", async () => {
    const agent = await agentOf("term-a");
    const access = tc.client(AccessService, { admin: true });
    const key = await access.createApiKey({ name: "term-operator", role: Role.OPERATOR });
    const call = attach(tc.client(TerminalService, { token: key.secret }), { tenantId: "pooled", nodeId: "term-a" });
    const opened = await agent.next("exec_open", execOpen);
    await access.revokeApiKey({ id: key.apiKey!.id });
    expect(apiCode(await call.ended)).toBe("UNAUTHORIZED");
    await agent.next("the close", closeOf(opened.execId));
    agent.close();
  });

  it("the node's token rotated: its session ends, and the terminal with it (UNAVAILABLE)", async () => {
    const agent = await agentOf("term-rot");
    const call = attach(tc.client(TerminalService, { admin: true }), { tenantId: "pooled", nodeId: "term-rot" });
    await agent.next("exec_open", execOpen);
    await tc.client(NodeService, { admin: true }).rotateNodeToken({ nodeId: "term-rot" });
    expect(apiCode(await call.ended)).toBe("UNAVAILABLE");
    await agent.ended();
  });
});

describe("the service, called directly", () => {
  it("a client that leaves before the relay starts frees the node's slot and closes the terminal on the agent", async () => {
    const sent: SessionResponse["kind"][] = [];
    const terminals = new SessionTerminals("n1", (kind) => sent.push(kind as never));
    const tenant = create(ResourceSchema, { id: "shop", resourceType: "tenant", desiredState: { kind: { case: "tenant", value: {} } } });
    const node = create(ResourceSchema, { id: "n1", resourceType: "node" });
    const deps = {
      store: {
        getResource: async (type: string) => (type === "tenant" ? tenant : node),
        appendAuditEntry: async () => undefined,
        appendEvent: async () => undefined,
      },
      sessions: { of: () => ({ terminals }) },
      credentialEnds: new CredentialEnds(),
      now: () => new Date(),
    } as unknown as ServiceDeps;
    const info: CallInfo = {
      requestId: "r1",
      correlationId: "c1",
      traceparent: "",
      principal: { kind: "admin" },
      actor: actorOf({ kind: "admin" }),
      tenants: { unrestricted: true, allows: async () => true, require: async () => undefined },
      audit: {},
      logger: pino({ level: "silent" }),
    } as CallInfo;
    const ctx = { values: createContextValues().set(callInfoKey, info), signal: new AbortController().signal } as unknown as HandlerContext;
    const requests = (async function* (): AsyncGenerator<AttachRequest> {
      yield create(AttachRequestSchema, {
        kind: { case: "open", value: { tenantId: "shop", nodeId: "n1", service: "web", argv: ["sh"] } },
      });
      await new Promise(() => undefined);
    })();
    const gen = terminalService(deps).attach(requests, ctx) as AsyncGenerator<AttachResponse>;
    expect((await gen.next()).value?.kind.case).toBe("opened");
    expect(terminals.size).toBe(1);
    // The client went: its answers are not read past `opened` (the relay never started).
    await gen.return(undefined);
    expect(terminals.size).toBe(0);
    expect(sent.map((k) => k?.case)).toEqual(["execOpen", "execInput"]);
    expect(sent[1]?.value).toMatchObject({ close: true });
  });
});
