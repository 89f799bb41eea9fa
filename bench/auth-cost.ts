// The cost of authentication per call: the npm run bench section, also run alone by npm run
// bench:auth (auth.ts). The same RPC is called with each kind of credential (auth-credentials.ts),
// so that only authentication differs:
//
//   WhoAmI     AccessService.WhoAmI: a public call, so the front door (request-gate.ts) lets it
//              through and the boundary interceptor authenticates whatever came, once; the
//              handler only returns the actor. With no credential it is the ceiling: the same
//              call, server and connections, with nothing to check.
//   Heartbeat  NodeService.Heartbeat, node token against client certificate: a call that needs a
//              credential, so it is authenticated twice (the front door before the body is read,
//              the interceptor after), and the node's record is updated (in memory; a beat that
//              changes only the time is written at most once a minute).
//
// The controller runs as its own process (dist/controller/main.js with its generated TLS and
// client CA, the file store unless told otherwise), as npm start runs it. Each phase (one RPC,
// one kind) has `concurrency` clients, each on its own HTTP/2 connection, all opened and warmed
// before any timing; then `rounds` rounds each run every phase for `roundMs`, the order rotated
// from round to round so that a change in the load of the (shared) machine does not favour one
// kind. The figures pool the rounds: calls/s, p50/p99 latency, and the controller's CPU per call
// (from /proc), which shows the cost itself even when the clients, not the controller, set the pace.
import { createClient } from "@connectrpc/connect";
import { ActorKind } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { makeCredentials, CREDENTIAL_KINDS, type CredentialKind } from "./auth-credentials.js";
import { closedLoop, cpuSeconds } from "./closed-loop.js";
import { type Controller, startController, transportTo } from "./controller-process.js";
import { machineBusy, percentile } from "./measure.js";
import { stopChild } from "./node-child.js";

const ADMIN = "bench-admin-token-0123456789abcdef";
const ACTOR_OF: Record<CredentialKind, ActorKind> = {
  none: ActorKind.ANONYMOUS,
  "admin token": ActorKind.ADMIN_TOKEN,
  "API key": ActorKind.API_KEY,
  "node token": ActorKind.NODE,
  mTLS: ActorKind.NODE,
};

export interface AuthCostOptions {
  /** The dist/ folder holding controller/main.js. */
  dist: string;
  dataDir: string;
  concurrency: number;
  roundMs: number;
  rounds: number;
  /** Closed-loop calls of each phase before the rounds, untimed. */
  warmupMs: number;
  /** Extra arguments to the controller, e.g. ["--store", "postgres://…"]. */
  controllerArgs?: string[];
  /** Extra arguments to node for the controller, e.g. ["--cpu-prof"]. */
  nodeArgs?: string[];
  /** Also measure Heartbeat (node token against client certificate). */
  heartbeat?: boolean;
  /** Told of progress, one line at a time. */
  log?: (line: string) => void;
}

/** One phase's figures, over every round. */
export interface AuthPhase {
  rpc: "WhoAmI" | "Heartbeat";
  kind: CredentialKind;
  calls: number;
  seconds: number;
  rate: number;
  p50: number;
  p99: number;
  /** The controller's CPU time per call, ms. */
  cpuMsPerCall: number;
  /** calls/s of each round, in round order. */
  roundRates: number[];
}

/** What the section measured, and how. */
export interface AuthCost {
  store: string;
  concurrency: number;
  roundMs: number;
  rounds: number;
  phases: AuthPhase[];
  /** Cores the controller, this process (the clients) and every other process on the machine (it is shared) kept busy over the rounds. */
  controllerCores: number;
  clientCores: number;
  otherCores: number;
  cores: number;
}

interface Plan {
  rpc: AuthPhase["rpc"];
  kind: CredentialKind;
  call: (worker: number) => Promise<unknown>;
}

/** Starts a controller, makes the credentials, measures every phase and stops the controller. */
export async function measureAuthCost(opts: AuthCostOptions): Promise<AuthCost> {
  const log = opts.log ?? (() => undefined);
  const n = opts.concurrency;
  const ctl = await startController(opts.dist, opts.dataDir, ADMIN, opts.nodeArgs, opts.controllerArgs);
  try {
    const plans = await planPhases(ctl, n, opts.heartbeat ?? true);
    const cpu = cpuSeconds(ctl.child.pid!);
    log(`auth: ${plans.length} phases x ${n} connections open; warming up`);
    for (const p of plans) await closedLoop(nameOf(p), n, opts.warmupMs, async (w) => void (await p.call(w)));
    const busy0 = machineBusy().busySeconds;
    const ctl0 = cpu();
    const self0 = process.cpuUsage();
    const t0 = performance.now();
    const phases = await runRounds(plans, opts, cpu, log);
    const elapsed = (performance.now() - t0) / 1000;
    const self = process.cpuUsage(self0);
    const controller = cpu() - ctl0;
    const client = (self.user + self.system) / 1e6;
    const others = machineBusy().busySeconds - busy0 - controller - client;
    return {
      store: opts.controllerArgs?.includes("--store") ? "postgres" : "file",
      concurrency: n,
      roundMs: opts.roundMs,
      rounds: opts.rounds,
      phases,
      controllerCores: controller / elapsed,
      clientCores: client / elapsed,
      otherCores: others / elapsed,
      cores: machineBusy().cores,
    };
  } finally {
    await stopChild(ctl.child);
  }
}

/** Runs every phase once a round, for `opts.rounds` rounds, and pools each phase's rounds. */
async function runRounds(plans: Plan[], opts: AuthCostOptions, cpu: () => number, log: (line: string) => void): Promise<AuthPhase[]> {
  const n = opts.concurrency;
  const acc = plans.map(() => ({ calls: 0, seconds: 0, cpu: 0, samples: [] as number[], roundRates: [] as number[] }));
  // Each round starts further along the list: over the rounds every phase runs early and late.
  const step = Math.ceil(plans.length / opts.rounds);
  for (let r = 0; r < opts.rounds; r++) {
    for (let i = 0; i < plans.length; i++) {
      const k = (i + r * step) % plans.length;
      const p = plans[k]!;
      const a = acc[k]!;
      const res = await closedLoop(nameOf(p), n, opts.roundMs, async (w) => void (await p.call(w)), cpu, a.samples);
      a.calls += res.ops;
      a.seconds += res.seconds;
      a.cpu += (res.cpu ?? NaN) * res.seconds;
      a.roundRates.push(res.rate);
    }
    if ((r + 1) % 4 === 0 || r + 1 === opts.rounds) log(`auth: round ${r + 1} of ${opts.rounds} done`);
  }
  return plans.map((p, k): AuthPhase => {
    const a = acc[k]!;
    a.samples.sort((x, y) => x - y);
    return {
      rpc: p.rpc,
      kind: p.kind,
      calls: a.calls,
      seconds: a.seconds,
      rate: a.calls / a.seconds,
      p50: percentile(a.samples, 50),
      p99: percentile(a.samples, 99),
      cpuMsPerCall: (a.cpu * 1000) / a.calls,
      roundRates: a.roundRates,
    };
  });
}

/**
 * The phases: WhoAmI with every kind, then (when asked) Heartbeat with the two node kinds; each
 * client on its own connection, opened (TLS handshake and all) here, before any timing.
 */
async function planPhases(ctl: Controller, n: number, heartbeat: boolean): Promise<Plan[]> {
  const creds = await makeCredentials(ctl, ADMIN, n);
  const transport = (kind: CredentialKind, w: number) => {
    const c = creds[kind][w]!;
    return transportTo(ctl.url, ctl.ca, c.headers, c.clientCert ? { clientCert: c.clientCert } : {});
  };
  const plans: Plan[] = [];
  for (const kind of CREDENTIAL_KINDS) {
    const clients = Array.from({ length: n }, (_, w) => createClient(AccessService, transport(kind, w)));
    // The first call (which opens each connection) must come back as the expected caller: a client
    // certificate the server ignored would otherwise measure an anonymous call as mTLS.
    await Promise.all(
      clients.map(async (c) => {
        const actor = (await c.whoAmI({})).actor?.kind;
        if (actor !== ACTOR_OF[kind]) throw new Error(`WhoAmI with ${kind} answered actor kind ${actor}, not ${ACTOR_OF[kind]}`);
      }),
    );
    plans.push({ rpc: "WhoAmI", kind, call: (w) => clients[w]!.whoAmI({}) });
  }
  if (!heartbeat) return plans;
  for (const kind of ["node token", "mTLS"] as const) {
    const clients = Array.from({ length: n }, (_, w) => createClient(NodeService, transport(kind, w)));
    const call = (w: number) => clients[w]!.heartbeat({ nodeId: creds[kind][w]!.nodeId });
    await Promise.all(clients.map((_, w) => call(w)));
    plans.push({ rpc: "Heartbeat", kind, call });
  }
  return plans;
}

function nameOf(p: Plan): string {
  return `${p.rpc} (${p.kind})`;
}
