// The figures of the authentication section (auth-cost.ts): a table of the phases side by side,
// the target (credentials under 10 % apart in calls/s) and one JSON line.
import type { AuthCost, AuthPhase } from "./auth-cost.js";

/** The target: the slowest credential's calls/s at least this share of the fastest's. */
const WITHIN = 0.9;

/** Prints the phases as a table, the targets, and one JSON line. */
export function printAuthCost(r: AuthCost): void {
  const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : "-");
  const credentialed = (rpc: string) => r.phases.filter((p) => p.rpc === rpc && p.kind !== "none");
  const fastest = (rpc: string) => Math.max(...credentialed(rpc).map((p) => p.rate));
  const ceiling = r.phases.find((p) => p.rpc === "WhoAmI" && p.kind === "none");
  // A round's rate against the phase's mean: how much the same phase moved between rounds.
  const spread = (p: AuthPhase) => (Math.max(...p.roundRates) - Math.min(...p.roundRates)) / p.rate;
  const rows = r.phases.map((p) => [
    p.rpc,
    p.kind,
    String(p.calls),
    fmt(p.rate, 0),
    `${fmt(Math.min(...p.roundRates), 0)}-${fmt(Math.max(...p.roundRates), 0)}`,
    fmt(p.p50, 2),
    fmt(p.p99, 2),
    fmt(p.cpuMsPerCall * 1000, 0),
    // What authenticating added to the controller's CPU per call, against the same RPC with none.
    p.rpc === "WhoAmI" && ceiling && p !== ceiling ? fmt((p.cpuMsPerCall - ceiling.cpuMsPerCall) * 1000, 0) : "",
    p.kind === "none" ? "" : fmt(p.rate / fastest(p.rpc), 2),
    p.rpc === "WhoAmI" && ceiling ? fmt(p.rate / ceiling.rate, 2) : "",
  ]);
  const header = [
    "rpc",
    "credential",
    "calls",
    "calls/s",
    "calls/s range over rounds",
    "p50 ms",
    "p99 ms",
    "server cpu us/call",
    "auth cpu us/call",
    "vs fastest",
    "vs no credential",
  ];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  console.log(
    `authentication per call: ${r.concurrency} clients per phase, each on its own HTTP/2 + TLS connection; ${r.rounds} rounds of ${fmt(r.roundMs / 1000)} s per phase, order rotated; ${r.store} store; node ${process.version}`,
  );
  console.log(line(header));
  console.log(`| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`);
  for (const row of rows) console.log(line(row));
  const noise = Math.max(...r.phases.map(spread));
  // A controller short of a whole core is not what limits calls/s: its CPU per call then says
  // more about what authentication costs than calls/s does.
  console.log(
    `busy over the rounds: the controller ${fmt(r.controllerCores, 2)}, the clients ${fmt(r.clientCores, 2)}, other processes${r.store === "postgres" ? " (PostgreSQL's lookups among them)" : ""} ${fmt(r.otherCores, 2)} of ${r.cores} cores; the same phase moved up to ${fmt(noise * 100, 0)} % between rounds`,
  );

  const targets: Array<{ target: string; ok: boolean; value: number }> = [];
  for (const rpc of ["WhoAmI", "Heartbeat"]) {
    const kinds = credentialed(rpc);
    if (kinds.length < 2) continue;
    const slowest = Math.min(...kinds.map((p) => p.rate)) / fastest(rpc);
    targets.push({
      target: `${rpc}: ${kinds.map((p) => p.kind).join(", ")} under 10 % apart (slowest / fastest calls/s >= ${WITHIN})`,
      ok: slowest >= WITHIN,
      value: slowest,
    });
  }
  console.log("");
  for (const t of targets) console.log(`${t.ok ? "MET " : "MISS"}  ${t.target}  (${fmt(t.value, 2)})`);
  console.log(
    JSON.stringify({
      bench: "auth",
      store: r.store,
      concurrency: r.concurrency,
      round_s: r.roundMs / 1000,
      rounds: r.rounds,
      node: process.version,
      phases: r.phases.map((p) => ({
        ...p,
        rate: Math.round(p.rate),
        p50: +p.p50.toFixed(3),
        p99: +p.p99.toFixed(3),
        cpuMsPerCall: +p.cpuMsPerCall.toFixed(4),
        roundRates: p.roundRates.map(Math.round),
      })),
      controller_cores: +r.controllerCores.toFixed(2),
      client_cores: +r.clientCores.toFixed(2),
      other_cores: +r.otherCores.toFixed(2),
      targets,
    }),
  );
}
