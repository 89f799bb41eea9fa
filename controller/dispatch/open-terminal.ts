// Opening a terminal (TerminalService.Attach): the request's rules, the node (the one named, or
// the tenant's only node), that node's live session on this controller, then the audit entry and
// the terminal_opened event (who, tenant, service, node, argv; never stdin) before exec_open goes
// out. Agents accept no connections, so a node whose session is on another controller (several
// controllers on one store) or that polls without one cannot be reached: UNAVAILABLE, saying so.
import { randomUUID } from "node:crypto";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import type { AttachOpen } from "../../gen/skipper/v1/terminal_service_pb.js";
import { execActionProblem } from "../../common/action-rules.js";
import { traceOf, type CallInfo } from "../base/context.js";
import { invalid, SkipperError } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { recordEvents } from "../events/event-recorder.js";
import type { Store } from "../store/store.js";
import type { AgentSessions } from "./agent-session.js";
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
  const nodeId = await nodeOf(deps.store, tenantId, open.nodeId);
  const session = deps.sessions.of(nodeId);
  if (!session)
    throw new SkipperError(
      "UNAVAILABLE",
      `node ${nodeId} holds no session on this controller: a terminal rides the node's own session (its agent may be offline, polling with unary calls, or connected to another controller)`,
      { node_id: nodeId },
    );
  const execId = randomUUID();
  const relay = new TerminalRelay(session.terminals, execId, deps.relayLimits ?? DEFAULT_RELAY_LIMITS);
  const trace = traceOf(call);
  // The program, never its arguments (`mysql -pSECRET`), as exec_service's summary: events reach webhooks.
  const what = {
    service: open.service,
    replica: open.replica,
    command: open.argv[0] ?? "",
    tty: open.tty,
    user: open.user,
    workdir: open.workdir,
  };
  const event = { requestId: trace.requestId, correlationId: trace.correlationId, traceparent: trace.traceparent, actor: call.actor };
  const subject = { resourceType: "terminal", resourceId: execId, tenantId, nodeId };
  await deps.store.appendAuditEntry({
    time: timestampNow(),
    actor: call.actor,
    rpc: "skipper.v1.TerminalService/Attach",
    target: `terminal/${execId}`,
    tenantId,
    requestId: call.requestId,
    correlationId: call.correlationId,
    outcome: "OK",
  });
  await recordEvents(deps.store, [{ type: "terminal_opened", ...event, ...subject, data: { ...what, env: Object.keys(open.env).sort() } }]);
  const size = open.size ?? { rows: 0, cols: 0 };
  session.terminals.start({ execId, ...open, tenantId, rows: size.rows, cols: size.cols }, relay);
  call.logger.info(
    { action: "terminal_opened", result: "ok", tenant_id: tenantId, node_id: nodeId, metadata: { exec_id: execId, ...what } },
    `terminal ${execId} opened on node ${nodeId}`,
  );
  return {
    execId,
    nodeId,
    relay,
    closed: async (end) => {
      const data = {
        exit_code: end?.exitCode ?? null,
        failure: end?.failure?.message ?? null,
        bytes_in: end?.bytesIn ?? 0,
        bytes_out: end?.bytesOut ?? 0,
      };
      await recordEvents(deps.store, [{ type: "terminal_closed", ...event, ...subject, data }]);
      call.logger.info(
        { action: "terminal_closed", result: end?.failure?.code ?? "ok", node_id: nodeId, metadata: { exec_id: execId, ...data } },
        "terminal closed",
      );
    },
  };
}

// The node named, or the tenant's only one.
async function nodeOf(store: Store, tenantId: string, named: string): Promise<string> {
  if (named !== "") return checkId(named, "open.node_id");
  const tenant = await store.getResource("tenant", tenantId);
  if (!tenant || tenant.deletion) throw new SkipperError("RESOURCE_NOT_FOUND", `tenant ${tenantId} not found`, { tenant_id: tenantId });
  const st = tenant.currentState?.kind.case === "tenant" ? tenant.currentState.kind.value : undefined;
  const nodes = [...new Set((st?.targets ?? []).map((t) => t.nodeId))].sort();
  if (nodes.length === 1) return nodes[0]!;
  if (nodes.length === 0) throw invalid(`tenant ${tenantId} runs on no node`, { field: "open.node_id" });
  throw invalid(`tenant ${tenantId} runs on ${nodes.join(", ")}: name one (--node)`, { field: "open.node_id" });
}
