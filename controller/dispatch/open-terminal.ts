// Opening a terminal (TerminalService.Attach): the request's rules, the node (the one named, or
// the tenant's only node) held to the tenant's placement as an exec_service order's is
// (node-permits.ts checkTenantNode: inside its node pool; for a caller scoped to some tenants, a
// node it runs on), that node's live session on this controller and a slot there, then the call's
// one audit entry (naming the terminal) and the terminal_opened event (who, tenant, service, node,
// program; never stdin) before exec_open goes out. Agents accept no connections, so a node whose
// session is on another controller (several controllers on one store) or that polls without one
// cannot be reached: UNAVAILABLE, saying so.
import { randomUUID } from "node:crypto";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import type { AttachOpen } from "../../gen/skipper/v1/terminal_service_pb.js";
import { execActionProblem } from "../../common/action-rules.js";
import { traceOf, type CallInfo } from "../base/context.js";
import { conflict, invalid, notFound, SkipperError } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { recordEvents } from "../events/event-recorder.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Store } from "../store/store.js";
import type { AgentSessions } from "./agent-session.js";
import { checkTenantNode } from "./node-permits.js";
import { DEFAULT_RELAY_LIMITS, TerminalRelay, type RelayEnd, type RelayLimits } from "./terminal-relay.js";

export interface TerminalDeps {
  store: Store;
  sessions: AgentSessions;
  relayLimits?: RelayLimits;
}

/** A terminal opened on a node: its relay, and how to record its end. */
export interface OpenedTerminal {
  execId: string;
  nodeId: string;
  relay: TerminalRelay;
  /** Records the terminal_closed event (exit code, bytes each way). */
  closed(end: RelayEnd | undefined): Promise<void>;
}

/** Checks `open`, picks its node and opens the terminal there; throws the refusal. */
export async function openTerminal(deps: TerminalDeps, call: CallInfo, open: AttachOpen): Promise<OpenedTerminal> {
  const tenantId = checkId(open.tenantId, "open.tenant_id");
  const problem = execActionProblem({ ...open, stdin: new Uint8Array() });
  if (problem) throw invalid(`${problem.field.replace("action.exec_service.", "open.")} ${problem.problem}`, { field: problem.field });
  if (open.replica > 1000) throw invalid("open.replica must be at most 1000", { field: "open.replica" });
  await call.tenants.require(tenantId);
  // A refusal from here on is audited naming the tenant (the boundary's entry of a failed call).
  call.audit.tenantId = tenantId;
  const tenant = await deps.store.getResource("tenant", tenantId);
  if (!tenant) throw notFound("tenant", tenantId);
  if (tenant.deletion) throw conflict(`tenant ${tenantId} is deleted`, { tenant_id: tenantId });
  const nodeId = nodeOf(tenant, open.nodeId);
  const node = await deps.store.getResource("node", nodeId);
  if (!node) throw notFound("node", nodeId, `node ${nodeId} is not registered`);
  checkTenantNode(node, tenant, !call.tenants.unrestricted);
  const session = deps.sessions.of(nodeId);
  if (!session)
    throw new SkipperError(
      "UNAVAILABLE",
      `node ${nodeId} holds no session on this controller: a terminal rides the node's own session (its agent may be offline, polling with unary calls, or connected to another controller)`,
      { node_id: nodeId },
    );
  const execId = randomUUID();
  const limits = deps.relayLimits ?? DEFAULT_RELAY_LIMITS;
  const relay = new TerminalRelay(session.terminals, execId, limits);
  // The slot first: a node with its share open is refused before anything is recorded.
  session.terminals.reserve(execId, relay);
  try {
    await recordOpened(deps.store, call, { execId, tenantId, nodeId }, open);
  } catch (e) {
    relay.abandon(new SkipperError("INTERNAL_ERROR", "the terminal's audit entry could not be written"));
    throw e;
  }
  const size = open.size ?? { rows: 0, cols: 0 };
  session.terminals.start({ execId, ...open, tenantId, rows: size.rows, cols: size.cols, outputWindow: limits.outputWindowBytes });
  return {
    execId,
    nodeId,
    relay,
    closed: (end) => recordClosed(deps.store, call, { execId, tenantId, nodeId }, end),
  };
}

interface Opened {
  execId: string;
  tenantId: string;
  nodeId: string;
}

// The call's audit entry (the boundary writes none more for it) and terminal_opened.
async function recordOpened(store: Store, call: CallInfo, opened: Opened, open: AttachOpen): Promise<void> {
  const { execId, tenantId, nodeId } = opened;
  // The program, never its arguments (`mysql -pSECRET`), as exec_service's summary: events reach webhooks.
  const what = {
    service: open.service,
    replica: open.replica,
    command: open.argv[0] ?? "",
    tty: open.tty,
    user: open.user,
    workdir: open.workdir,
  };
  await store.appendAuditEntry({
    time: timestampNow(),
    actor: call.actor,
    rpc: "skipper.v1.TerminalService/Attach",
    target: `terminal/${execId}`,
    tenantId,
    requestId: call.requestId,
    correlationId: call.correlationId,
    outcome: "OK",
  });
  call.audit.written = true;
  await recordEvents(store, [{ type: "terminal_opened", ...eventOf(call, opened), data: { ...what, env: Object.keys(open.env).sort() } }]);
  call.logger.info(
    { action: "terminal_opened", result: "ok", tenant_id: tenantId, node_id: nodeId, metadata: { exec_id: execId, ...what } },
    `terminal ${execId} opened on node ${nodeId}`,
  );
}

// terminal_closed: the exit code or why it broke, and the bytes each way (never their content).
async function recordClosed(store: Store, call: CallInfo, opened: Opened, end: RelayEnd | undefined): Promise<void> {
  const data = {
    exit_code: end?.exitCode ?? null,
    failure: end?.failure?.message ?? null,
    bytes_in: end?.bytesIn ?? 0,
    bytes_out: end?.bytesOut ?? 0,
  };
  await recordEvents(store, [{ type: "terminal_closed", ...eventOf(call, opened), data }]);
  call.logger.info(
    {
      action: "terminal_closed",
      result: end?.failure?.code ?? "ok",
      node_id: opened.nodeId,
      metadata: { exec_id: opened.execId, ...data },
    },
    "terminal closed",
  );
}

// A terminal event's trace and subject.
function eventOf(call: CallInfo, { execId, tenantId, nodeId }: Opened) {
  const trace = traceOf(call);
  return {
    requestId: trace.requestId,
    correlationId: trace.correlationId,
    traceparent: trace.traceparent,
    actor: call.actor,
    resourceType: "terminal",
    resourceId: execId,
    tenantId,
    nodeId,
  };
}

// The node named, or the tenant's only one.
function nodeOf(tenant: Resource, named: string): string {
  if (named !== "") return checkId(named, "open.node_id");
  const st = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value : undefined;
  const nodes = [...new Set((st?.targets ?? []).map((t) => t.nodeId))].sort();
  if (nodes.length === 1) return nodes[0]!;
  if (nodes.length === 0) throw invalid(`tenant ${tenant.id} runs on no node`, { field: "open.node_id" });
  throw invalid(`tenant ${tenant.id} runs on ${nodes.join(", ")}: name one (--node)`, { field: "open.node_id" });
}
