// NodeService: admins register nodes and rotate their tokens; each node heartbeats, asks for its
// next work order and reports observed state, always about itself only, by unary calls or on
// its one Session stream.
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { RegisterNodeRequestSchema, RegisterNodeResponseSchema, type NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import type { WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { callInfo, orderTraceOf, responseMeta, traceOf, type CallInfo } from "../base/context.js";
import { forbidden, notFound, unauthorized } from "../base/errors.js";
import { nodeCredentialHolds } from "../auth/authenticator.js";
import { checkId } from "../base/id-checks.js";
import { claimNextOrder, nextOrderFor } from "../dispatch/order-lifecycle.js";
import { nextPoolOrderFor, nodeMayHear } from "../dispatch/pool-orders.js";
import { AgentSession } from "../dispatch/agent-session.js";
import { HeartbeatRecorder } from "../nodes/heartbeat.js";
import { registerNode, rotateNodeToken } from "../nodes/node-registration.js";
import { recordReports } from "../nodes/state-reports.js";
import { relayTargetsOf } from "../nodes/relay-targets.js";
import type { ServiceDeps } from "./deps.js";
import { idempotent } from "./idempotency.js";

// An open WatchWorkOrders stream gets a keepalive this often when nothing happens: under the 60 s
// idle timeout common to proxies and load balancers, and rare enough to cost little at 1,000 streams.
const WATCH_KEEPALIVE_MS = 45_000;

// One recorder per controller (it remembers when each node's last heartbeat event was written),
// shared by the routed calls, the in-memory transport's and the Session route.
const recorders = new WeakMap<ServiceDeps, HeartbeatRecorder>();

function heartbeatRecorder(deps: ServiceDeps): HeartbeatRecorder {
  let recorder = recorders.get(deps);
  if (!recorder) recorders.set(deps, (recorder = newRecorder(deps)));
  return recorder;
}

function newRecorder(deps: ServiceDeps): HeartbeatRecorder {
  return new HeartbeatRecorder({
    store: deps.store,
    now: deps.now,
    onHeartbeat: deps.onHeartbeat,
    onRecorded: (beat) => deps.triggers.heartbeatRecorded(beat),
    onAgentCounters: (nodeId, counters, at) => deps.metrics.agentReported(nodeId, counters, at),
  });
}

/**
 * Opens an agent's Session for an admitted call: the routed Session below, and the same method
 * served outside the router (boundary/session-route.ts).
 */
export function agentSessionOpener(deps: ServiceDeps): (call: CallInfo) => AgentSession {
  const heartbeats = heartbeatRecorder(deps);
  return (call) => new AgentSession(deps, call, heartbeats);
}

/** Node implementation. */
export function nodeService(deps: ServiceDeps): ServiceImpl<typeof NodeService> {
  const { store } = deps;
  const heartbeats = heartbeatRecorder(deps);
  const openSession = agentSessionOpener(deps);

  function selfOnly(call: CallInfo, nodeId: string): string {
    checkId(nodeId, "node_id");
    if (call.principal.kind === "node" && call.principal.nodeId !== nodeId) {
      throw forbidden(`this token belongs to node ${call.principal.nodeId}, not ${nodeId}`, { node_id: nodeId });
    }
    return nodeId;
  }

  return {
    async registerNode(req, ctx) {
      const nodeId = checkId(req.nodeId, "node_id");
      const call = callInfo(ctx);
      const res = await idempotent(
        deps,
        call,
        "NodeService/RegisterNode",
        { request: RegisterNodeRequestSchema, response: RegisterNodeResponseSchema },
        req,
        async () => {
          const { node, token } = await registerNode(deps, nodeId, req, traceOf(call));
          return create(RegisterNodeResponseSchema, { node, token });
        },
        // The token is stored only as a hash: a retry whose first answer was lost gets a new one
        // (the first, never received, stops working), and the node as it is now.
        async () => {
          const token = await rotateNodeToken(deps, nodeId, traceOf(call));
          deps.credentialEnds.changed(`node:${nodeId}`);
          return create(RegisterNodeResponseSchema, { node: await store.getResource("node", nodeId), token });
        },
      );
      return { ...res, meta: responseMeta(ctx) };
    },

    async rotateNodeToken(req, ctx) {
      const nodeId = checkId(req.nodeId, "node_id");
      const token = await rotateNodeToken(deps, nodeId, traceOf(callInfo(ctx)));
      // Streams the old token opened end now, not at their next reconnect.
      deps.credentialEnds.changed(`node:${nodeId}`);
      return { meta: responseMeta(ctx), token };
    },

    async heartbeat(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = selfOnly(call, req.nodeId);
      const beat = await heartbeats.record(nodeId, req, traceOf(call));
      return {
        meta: responseMeta(ctx),
        serverTime: timestampFromDate(beat.at),
        // Its own, or else one if a pool order waits that it may claim.
        pendingWorkOrders: (await store.countPendingWorkOrders(nodeId)) || ((await nextPoolOrderFor(deps, nodeId)) ? 1 : 0),
      };
    },

    async getNextWorkOrder(req, ctx) {
      const nodeId = selfOnly(callInfo(ctx), req.nodeId);
      return { meta: responseMeta(ctx), workOrder: await nextOrderFor(deps, nodeId) };
    },

    async claimNextWorkOrder(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = selfOnly(call, req.nodeId);
      const trace = (order: WorkOrder) => orderTraceOf(call, order);
      return { meta: responseMeta(ctx), workOrder: await claimNextOrder(deps, nodeId, trace, call.logger) };
    },

    async *watchWorkOrders(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = selfOnly(call, req.nodeId);
      yield* watchOrders(deps, call, nodeId, ctx);
    },

    // The agent's one stream (dispatch/agent-session.ts): the node is the caller's, named by its hello.
    session(requests, ctx) {
      return openSession(callInfo(ctx)).run(requests, ctx.signal);
    },

    // A relay's SSH nodes; only its own credential, never one acting for another node.
    async listRelayTargets(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = selfOnly(call, req.nodeId);
      if (call.principal.kind === "node" && call.principal.relayNodeId)
        throw forbidden("a relay lists its targets with its own credential", { node_id: nodeId });
      const { targets, opened } = await relayTargetsOf(store, deps.keyRing, nodeId, req.includeKeys);
      if (req.includeKeys) {
        call.audit.handedOutSecrets = true;
        call.audit.target = opened.length > 0 ? `secret/${opened.join(",")}`.slice(0, 512) : `node/${nodeId}`;
      }
      return { meta: responseMeta(ctx), targets };
    },

    async reportResourceState(req, ctx) {
      const call = callInfo(ctx);
      const nodeId = selfOnly(call, req.nodeId);
      const order = req.workOrderId === "" ? undefined : await store.getWorkOrder(checkId(req.workOrderId, "work_order_id"));
      if (req.workOrderId !== "" && !order) throw notFound("work_order", req.workOrderId);
      if (order && order.target?.nodeId !== nodeId) throw forbidden(`work order ${order.id} belongs to another node`);
      return { meta: responseMeta(ctx), resources: await recordReports(deps, nodeId, order, req.reports, traceOf(call)) };
    },
  };
}

// A node's WatchWorkOrders stream: its next pending order at once, then each order as it becomes
// pending (of pool orders, those its pool admits), or a keepalive when nothing happens for WATCH_KEEPALIVE_MS; it ends when the client
// goes or the node's credential no longer holds.
async function* watchOrders(deps: ServiceDeps, call: CallInfo, nodeId: string, ctx: HandlerContext) {
  const { store } = deps;
  const queue: WorkOrder[] = [];
  let wake: (() => void) | undefined;
  const unsubscribe = deps.feed.subscribe(nodeId, (o) => {
    queue.push(o);
    wake?.();
  });
  // A credential that ends (token rotated, certificates revoked, node deleted) wakes the
  // stream, which then finds it no longer holds.
  const unwatch = deps.credentialEnds.watch(call.principal, () => wake?.());
  try {
    // Subscribed first, then read: an order created in between is sent twice, never missed.
    yield { meta: responseMeta(ctx), workOrder: await store.nextPendingWorkOrder(nodeId), serverTime: timestampFromDate(deps.now()) };
    while (!ctx.signal.aborted) {
      if (queue.length === 0) {
        await new Promise<void>((resolve) => {
          const done = () => {
            clearTimeout(timer);
            ctx.signal.removeEventListener("abort", done);
            wake = undefined;
            resolve();
          };
          const timer = setTimeout(done, WATCH_KEEPALIVE_MS);
          wake = done;
          ctx.signal.addEventListener("abort", done, { once: true });
        });
      }
      if (ctx.signal.aborted) break;
      // A stream outlives the check that admitted it: a node revoked or deleted since hears
      // nothing more (its orders carry its services' secrets).
      if (!(await nodeCredentialHolds(store, call.principal, deps.now()))) {
        throw unauthorized("this node's credential has been revoked");
      }
      const order = queue.shift();
      // The feed rings every watch for a pool order no node holds: only a node its pool admits hears it.
      if (order && !(await nodeMayHear(store, order, nodeId))) continue;
      yield { meta: responseMeta(ctx), workOrder: order, serverTime: timestampFromDate(deps.now()) };
    }
  } finally {
    unsubscribe();
    unwatch();
  }
}
