// --metrics-listen: the agent's counters (agent-tally.ts) at GET /metrics in Prometheus' text
// format, over plain HTTP on the address given (loopback unless allowed otherwise:
// metrics-address.ts), for a node exporter's textfile collector, a local Prometheus agent or a
// person with curl. The same totals reach the controller with every heartbeat; this is for
// watching one host. prom-client is loaded only when the flag is set.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import type { Counter as CounterType } from "prom-client";
import type { AgentTally, AgentEvent } from "./agent-tally.js";
import type { MetricsAddress } from "./metrics-address.js";

/** A listening metrics page: its URL, and how to close it. */
export interface MetricsListener {
  url: string;
  close(): Promise<void>;
}

const EVENTS: [AgentEvent | "heartbeatsAcknowledged", string, string][] = [
  ["heartbeatsAcknowledged", "skippy_heartbeats_total", "Heartbeats the controller answered."],
  ["heartbeatFailures", "skippy_heartbeat_failures_total", "Heartbeats that failed (the controller unreachable or refusing them)."],
  ["claimsRefused", "skippy_claims_refused_total", "Claims the controller refused (cancelled, gone, or held by another claim)."],
  [
    "leasesLost",
    "skippy_leases_lost_total",
    "Leases lost: a renewal refused, none granted in time, or one that lapsed while the agent was down.",
  ],
  ["reportRetries", "skippy_report_retries_total", "Result reports sent again after one failed."],
  ["watchReconnects", "skippy_watch_reconnects_total", "Times the WatchWorkOrders stream connected again after it broke."],
  ["sessionReconnects", "skippy_session_reconnects_total", "Times the Session stream was opened again after one ended or failed."],
  ["sessionFallbacks", "skippy_session_fallbacks_total", "Times transport auto fell back to unary polling (no Session RPC, or no stream)."],
];

/** Serves `tally` at http://<at>/metrics until closed; rejects when it cannot listen there. */
export async function listenForMetrics(at: MetricsAddress, tally: AgentTally, version: string, log: Logger): Promise<MetricsListener> {
  const { Counter, Gauge, Registry, collectDefaultMetrics } = await import("prom-client");
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  new Gauge({ name: "skippy_build_info", help: "Always 1: the agent's version.", labelNames: ["version"], registers: [registry] }).set(
    { version },
    1,
  );
  new Gauge({
    name: "skippy_start_time_seconds",
    help: "When the agent started (its counters count from then), in seconds since the epoch.",
    registers: [registry],
  }).set(tally.startedAt.getTime() / 1000);
  // Counters set from the tally at each scrape: reset, then raised to its totals.
  const orders: CounterType<"type" | "code"> = new Counter({
    name: "skippy_orders_total",
    help: "Orders the agent ended, by type and result code.",
    labelNames: ["type", "code"],
    registers: [registry],
    collect: () => {
      orders.reset();
      for (const o of tally.orderCounts()) orders.inc({ type: o.type, code: o.code }, o.count);
    },
  });
  for (const [event, name, help] of EVENTS) {
    const c: CounterType = new Counter({
      name,
      help,
      registers: [registry],
      collect: () => {
        c.reset();
        c.inc(tally.total(event));
      },
    });
  }
  const server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found: the agent serves /metrics only\n");
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": registry.contentType }).end(req.method === "HEAD" ? undefined : text),
      (e: unknown) => {
        log.error({ action: "metrics", result: "error", err: e }, "could not render the agent's metrics");
        res.writeHead(500).end();
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(at.port, at.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { address, port } = server.address() as AddressInfo;
  const url = `http://${address.includes(":") ? `[${address}]` : address}:${port}/metrics`;
  log.info({ action: "metrics_listen", result: "ok", metadata: { url } }, `serving the agent's metrics at ${url}`);
  return {
    url,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
