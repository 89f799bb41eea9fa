// What `npm start` shows a person: a summary of what started where, the once-only banners last,
// then one line per notable event. The programs' JSON log lines go to the data directory's log
// files; on the terminal they appear whole with --log-format json, and as one readable line each
// from the terminal's level up (warn; --log-level LEVEL lowers or raises it).
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";

const LEVELS = ["trace", "debug", "info", "warn", "error", "fatal"];
const rank = (level) => {
  const i = LEVELS.indexOf(level);
  return i < 0 ? LEVELS.length : i;
};

/** Prints to the terminal: `line` for one line, `block` for several. */
export function terminal(out = process.stdout) {
  return {
    line: (text) => out.write(`${text}\n`),
    block: (lines) => out.write(`${lines.join("\n")}\n`),
  };
}

const clock = (iso) => (iso ? new Date(iso) : new Date()).toISOString().slice(11, 19);

/**
 * A filter for one program's log lines: returns the text to print for a JSON line (undefined:
 * nothing). `format` "json" prints every line as it is; "text" one readable line for lines at
 * `level` or above; `quietCalls` leaves out the access log's client errors (the default
 * terminal, where no --log-level asked for more), and liveness lines are left to the event
 * stream while `followingEvents()`.
 */
export function logLineFilter({ program, format, level, quietCalls, followingEvents = () => false }) {
  return (raw, parsed) => {
    if (format === "json") return raw;
    if (!parsed || rank(parsed.level) < rank(level)) return undefined;
    // A call a client got an error answer for is the client's to show (the access log keeps it).
    if (quietCalls && parsed.level === "warn" && /^[A-Za-z]+Service\.[A-Za-z]+$/.test(parsed.action ?? "")) return undefined;
    // A node's liveness comes from the event stream, when followed.
    if (followingEvents() && /^node_(online|offline|degraded)$/.test(parsed.action ?? "")) return undefined;
    const where = [parsed.tenant_id && `tenant ${parsed.tenant_id}`, parsed.node_id && `node ${parsed.node_id}`].filter(Boolean).join(", ");
    const why = parsed.metadata?.message && !String(parsed.message).includes(parsed.metadata.message) ? `: ${parsed.metadata.message}` : "";
    return `${clock(parsed.timestamp)} ${program} ${parsed.level}: ${parsed.message}${why}${where ? ` (${where})` : ""}`;
  };
}

/** The events a person wants on the terminal, each as one line (undefined: not shown). */
export function eventLine(e) {
  const data = e.data ?? {};
  const cause = [data.code, data.message].filter(Boolean).join(": ");
  const at = `tenant ${e.tenantId || "?"}${e.nodeId ? ` on ${e.nodeId}` : ""}`;
  const text = {
    deployment_started: () => `deploy started: ${at}`,
    deployment_succeeded: () => `deploy succeeded: ${at}`,
    deployment_failed: () => `deploy FAILED: ${at}${cause ? `: ${cause}` : ""}`,
    convergence_changed: () => `tenant ${e.tenantId} is ${data.status ?? "?"}${data.message ? `: ${data.message}` : ""}`,
    drift_detected: () => `drift: ${at}${data.message ? `: ${data.message}` : ""}`,
    work_order_failed: () =>
      e.deploymentId ? undefined : `order ${e.workOrderId} FAILED on ${e.nodeId || "?"}${cause ? `: ${cause}` : ""}`,
    node_online: () => `node ${e.nodeId} is online`,
    node_degraded: () => `node ${e.nodeId} is degraded (heartbeats late)`,
    node_offline: () => `node ${e.nodeId} is OFFLINE (no heartbeat)`,
    rollout_started: () => `rollout started: tenant ${e.tenantId}`,
    rollout_succeeded: () => `rollout succeeded: tenant ${e.tenantId}`,
    rollout_failed: () => `rollout FAILED: tenant ${e.tenantId}${data.message ? `: ${data.message}` : ""}`,
  }[e.type]?.();
  return text === undefined ? undefined : `${clock(e.timestamp ? timestampIso(e.timestamp) : undefined)} ${text}`;
}

const timestampIso = (t) => new Date(Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6)).toISOString();

/**
 * Follows the controller's event stream (WatchEvents, from now) with the admin token and prints
 * one line per notable event until `signal` aborts; reconnects after a break, from the last event.
 */
export async function followEvents({ EventService, url, ca, adminToken, print, signal }) {
  const transport = createConnectTransport({
    baseUrl: `${url}/v1`,
    httpVersion: "2",
    nodeOptions: ca ? { ca } : {},
    interceptors: [(next) => (req) => (req.header.set("x-admin-token", adminToken), next(req))],
  });
  const events = createClient(EventService, transport);
  let since = { seconds: BigInt(Math.floor(Date.now() / 1000)), nanos: 0 };
  const seen = new Set();
  // A tenant's convergence is said when it changes, not each time a pass records it again.
  const convergence = new Map();
  while (!signal.aborted) {
    try {
      for await (const m of events.watchEvents({ since }, { signal })) {
        if (!m.event || seen.has(m.event.id)) continue;
        // A reconnect from `since` sends that second's events again: those seen are skipped.
        if (seen.size > 10_000) seen.clear();
        seen.add(m.event.id);
        if (m.event.timestamp) since = m.event.timestamp;
        if (m.event.type === "convergence_changed") {
          const status = `${m.event.data?.status} ${m.event.data?.message}`;
          if (convergence.get(m.event.tenantId) === status) continue;
          convergence.set(m.event.tenantId, status);
        }
        const line = eventLine({ ...m.event, data: m.event.data });
        if (line) print(line);
      }
    } catch (e) {
      if (signal.aborted) return;
      const code = ConnectError.from(e).code;
      if (code === Code.Unauthenticated || code === Code.PermissionDenied) {
        print(`events: the controller refused the admin token (${ConnectError.from(e).rawMessage}); deploys are in the log files only`);
        return;
      }
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}
