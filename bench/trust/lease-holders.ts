// Orders executed by two lease holders: two skippy processes serve the same node (one token,
// separate state dirs), so either may claim an order. Each order is an execute_command that
// writes "start" to a ledger, waits for a go-file the probe writes, then writes "end" ("stop"
// when it is stopped: SIGTERM); each line names the agent that ran it ($PPID: the agent spawns
// the shell itself). Once the ledger shows the order started, the probe cuts its holder off,
// waits for the other agent to take the order over under a higher fencing token, lets the
// commands finish, and checks that only the second claim's result counted: the first holder's
// late result is refused, the order ends once.
//
//   SIGSTOP run    the holder is frozen (SIGSTOP), thawed once both commands have ended.
//   partition run  each agent reaches the controller through its own TCP proxy on loopback; the
//                  holder's proxy stops all traffic, and heals once the other agent has taken
//                  over; the go-file is written once the first holder has logged that it lost
//                  its lease.
//
// A partitioned holder cannot renew, so it gives the order up when its lease, less a margin, has
// passed since the last renewal it was granted: its command must be stopped before the lease
// ends at the controller, i.e. before anyone else can claim the order (a bar of 0 on commands
// that ran on). A frozen agent cannot stop anything, and its child is not frozen: commands that
// ran to their end under both holders in the SIGSTOP run are measured (info), not barred.
import { writeFile, readFile, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import { EventService } from "../../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../../gen/skipper/v1/work_order_service_pb.js";
import { percentile } from "../measure.js";
import { startAgent, type AgentLogLine, type AgentProcess } from "./agent-process.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { exactly, fmt, info, type Figure, type Probe, type ProbeOptions } from "./figures.js";
import { startTcpProxy, type TcpProxy } from "./tcp-proxy.js";
import { waitUntil } from "./wait-until.js";

const NODE = "lease-node";
const LEASE = "2s";
// Bounds on each wait; generous, since a step normally takes a lease or less.
const STEP_MS = 30_000;
const FINISH_EVENTS = new Set(["work_order_succeeded", "work_order_failed", "work_order_cancelled", "work_order_expired"]);
const SCRIPT = [
  'trap \'echo "stop $TRUST_MARK $PPID" >> "$TRUST_LEDGER"; exit 143\' TERM',
  'echo "start $TRUST_MARK $PPID" >> "$TRUST_LEDGER"',
  'until [ -f "$TRUST_GO" ]; do sleep 0.05; done',
  'echo "end $TRUST_MARK $PPID" >> "$TRUST_LEDGER"',
  'echo "holder $PPID"',
].join("\n");

/** How one run cuts a holder off and lets it back. */
interface Cut {
  /** The run's name, in the figures' section. */
  label: string;
  /** Starts the two agents for the node. */
  agents(ctl: ControllerProcess, token: string, dir: string): Promise<AgentProcess[]>;
  /** Cuts `holder` off from the controller. */
  cut(holder: AgentProcess): void;
  /** After the takeover: lets the commands finish and the holder back, in the run's order. */
  release(holder: AgentProcess, order: OrderRun): Promise<void>;
  /** Undoes every cut (cleanup; idempotent). */
  restore(): void;
  close(): Promise<void>;
}

/** One order's run: what the probe saw. */
interface OrderRun {
  id: string;
  mark: string;
  goFile: string;
  ledger: Ledger;
  firstPid?: number;
  secondPid?: number;
  takenOver: boolean;
  takeoverMs?: number;
  /** The first holder logged that it lost its lease before the go-file. */
  toldLost: boolean;
  /** When (epoch ms) the first claim's lease ended at the controller, as last renewed. */
  leaseEnd?: number;
  /** When the first holder logged its lease lost, and when its run of the order had ended. */
  lostAt?: number;
  stoppedAt?: number;
  /** The first holder's command was still running when the lease ended (or when the second started). */
  ranOn: boolean;
  finished: boolean;
  finishEvents: number;
  staleAccepted: boolean;
  staleRefused: boolean;
  bothEnded: boolean;
  problems: string[];
}

export const leaseHoldersProbe: Probe = {
  name: "lease-holders",
  async run(opts) {
    const n = opts.short ? 2 : 10;
    return [...(await holdersRun(opts, sigstop(), n)), ...(await holdersRun(opts, partition(), n))];
  },
};

function sigstop(): Cut {
  const agents: AgentProcess[] = [];
  return {
    label: "SIGSTOP",
    async agents(ctl, token, dir) {
      for (const name of ["a", "b"]) agents.push(await startAgent(agentOptions(dir, name, ctl.url, ctl, token)));
      return agents;
    },
    cut: (holder) => holder.freeze(),
    async release(holder, o) {
      await writeFile(o.goFile, "");
      await o.ledger.waitFor((l) => l.ends(o.mark).length === 2, STEP_MS);
      holder.thaw();
    },
    restore: () => {
      for (const a of agents) a.thaw();
    },
    close: async () => undefined,
  };
}

function partition(): Cut {
  const proxies = new Map<AgentProcess, TcpProxy>();
  return {
    label: "partition",
    async agents(ctl, token, dir) {
      const agents: AgentProcess[] = [];
      for (const name of ["a", "b"]) {
        const proxy = await startTcpProxy({ host: "127.0.0.1", port: ctl.port });
        const agent = await startAgent(agentOptions(dir, name, `https://127.0.0.1:${proxy.port}`, ctl, token));
        proxies.set(agent, proxy);
        agents.push(agent);
      }
      return agents;
    },
    cut: (holder) => proxies.get(holder)!.partition(),
    async release(holder, o) {
      proxies.get(holder)!.heal();
      const told = await holder.waitForLog((l) => l.work_order_id === o.id && l.action === "lease_lost", STEP_MS);
      o.toldLost = told !== undefined;
      if (!told) o.problems.push("the first holder never logged that it lost its lease");
      await writeFile(o.goFile, "");
      // The first holder's command was stopped; should it run on, it ends now too.
      await o.ledger.waitFor((l) => l.ends(o.mark).includes(o.secondPid!), STEP_MS);
    },
    restore: () => {
      for (const p of proxies.values()) p.heal();
    },
    close: async () => {
      for (const p of proxies.values()) await p.close();
    },
  };
}

async function holdersRun(opts: ProbeOptions, how: Cut, n: number): Promise<Figure[]> {
  const section = `lease holders (${how.label})`;
  const dir = join(opts.workDir, how.label.toLowerCase());
  await mkdir(dir, { recursive: true });
  const ledger = new Ledger(join(dir, "ledger"));
  await writeFile(ledger.path, "");
  const ctl = await startController({ dataDir: join(dir, "data"), args: ["--lease-duration", LEASE] });
  const runs: OrderRun[] = [];
  let agents: AgentProcess[] = [];
  try {
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE })).token;
    agents = await how.agents(ctl, token, dir);
    for (let i = 0; i < n; i++) {
      const o = await runOrder(ctl, agents, how, ledger, dir, `${how.label.toLowerCase()}-${i}`);
      runs.push(o);
      opts.log(
        `${how.label} order ${i + 1}/${n} ${o.id}: ${o.takenOver ? `taken over in ${(o.takeoverMs! / 1000).toFixed(1)} s` : "NOT taken over"}, ` +
          `${o.finished ? "finished" : "NOT finished"}, stale result ${o.staleRefused ? "refused" : o.staleAccepted ? "ACCEPTED" : "not seen"}` +
          (o.problems.length ? `; ${o.problems.join("; ")}` : ""),
      );
    }
  } catch (e) {
    opts.log(`${how.label} run broke off: ${(e as Error).stack ?? String(e)}`);
  } finally {
    how.restore();
    for (const a of agents) await a.stop();
    await how.close();
    await ctl.stop();
  }
  return figures(section, how.label, n, runs);
}

/** One order: queued, started, its holder cut off, taken over, released, settled. */
async function runOrder(
  ctl: ControllerProcess,
  agents: AgentProcess[],
  how: Cut,
  ledger: Ledger,
  dir: string,
  mark: string,
): Promise<OrderRun> {
  const o: OrderRun = {
    id: "",
    mark,
    goFile: join(dir, `go-${mark}`),
    ledger,
    takenOver: false,
    toldLost: false,
    finished: false,
    finishEvents: 0,
    staleAccepted: false,
    staleRefused: false,
    bothEnded: false,
    ranOn: false,
    problems: [],
  };
  o.id = await queueOrder(ctl, o, dir);
  try {
    o.firstPid = await ledger.waitFor((l) => l.starts(mark)[0], STEP_MS);
    const holder = agents.find((a) => a.pid === o.firstPid);
    if (!holder) {
      o.problems.push(o.firstPid === undefined ? "the order never started" : `started by an unknown process ${o.firstPid}`);
      return o;
    }
    const first = await takeOver(ctl, how, holder, o);
    if (o.takenOver) await how.release(holder, o);
    // Whatever happened, nothing stays cut off or waiting.
    await writeFile(o.goFile, "");
    how.restore();
    await settle(ctl, holder, o, first);
  } finally {
    await writeFile(o.goFile, "");
    how.restore();
  }
  return o;
}

/** Queues the order; the node takes execute_command orders once an agent has reported `sh` as allowed. */
async function queueOrder(ctl: ControllerProcess, o: OrderRun, dir: string): Promise<string> {
  const created = await waitUntil(
    () =>
      ctl.admin(WorkOrderService).createWorkOrder({
        type: WorkOrderType.EXECUTE_COMMAND,
        target: { nodeId: NODE },
        action: {
          kind: {
            case: "executeCommand",
            value: {
              command: {
                argv: ["sh", "-c", SCRIPT],
                env: { TRUST_LEDGER: o.ledger.path, TRUST_GO: o.goFile, TRUST_MARK: o.mark },
                workingDir: dir,
                timeout: durationFromMs(5 * 60_000),
              },
            },
          },
        },
      }),
    STEP_MS,
    200,
  );
  if (!created?.workOrder) throw new Error("the controller never accepted an execute_command order for the node");
  return created.workOrder.id;
}

/**
 * Cuts the holder off once its claim is seen, and waits for the order to run under a higher
 * fencing token, started by the other agent. Returns the first claim's token.
 */
async function takeOver(ctl: ControllerProcess, how: Cut, holder: AgentProcess, o: OrderRun): Promise<bigint | undefined> {
  const claim = async () => (await ctl.admin(WorkOrderService).getWorkOrder({ id: o.id })).workOrder?.claim;
  const token = async () => (await claim())?.fencingToken ?? 0n;
  const first = await waitUntil(async () => {
    const t = await token();
    return t > 0n ? t : undefined;
  }, STEP_MS);
  if (first === undefined) {
    o.problems.push("the order's claim was never seen");
    return undefined;
  }
  const cutAt = performance.now();
  how.cut(holder);
  const second = await waitUntil(async () => {
    const other = (await o.ledger.read()).starts(o.mark).find((pid) => pid !== holder.pid);
    const c = await claim();
    // The first claim's lease as last renewed: it ends there at the controller.
    if (c?.fencingToken === first && c.leaseExpiresAt) o.leaseEnd = timestampDate(c.leaseExpiresAt).getTime();
    return other !== undefined && (c?.fencingToken ?? 0n) > first ? other : undefined;
  }, STEP_MS);
  if (second === undefined) o.problems.push("no other holder took the order over");
  else {
    o.takenOver = true;
    o.takeoverMs = performance.now() - cutAt;
    o.secondPid = second;
  }
  return first;
}

/** Waits for the order to end and for the first holder's late report, and records what counted. */
async function settle(ctl: ControllerProcess, holder: AgentProcess, o: OrderRun, first: bigint | undefined): Promise<void> {
  const get = async () => (await ctl.admin(WorkOrderService).getWorkOrder({ id: o.id })).workOrder;
  const done = await waitUntil(async () => {
    const w = await get();
    return w?.finishedAt ? w : undefined;
  }, STEP_MS);
  o.finished = done !== undefined;
  if (!done) o.problems.push("the order never finished");
  // The first holder's report: accepted ("ok") or refused; a transient failure is retried.
  const report = await holder.waitForLog(
    (l) => l.work_order_id === o.id && l.action === "report_result" && (l.result === "ok" || (l.message ?? "").includes("refused")),
    STEP_MS,
  );
  if (!report) o.problems.push("the first holder never reported its result");
  else if (report.result === "ok") o.staleAccepted = true;
  else o.staleRefused = true;
  // Read after that report: a stale result that got through would show here.
  const final = done ? await get() : undefined;
  if (final && acceptedFrom(final, holder.pid, first)) o.staleAccepted = true;
  const events = (await ctl.admin(EventService).listEvents({ workOrderId: o.id })).events;
  o.finishEvents = events.filter((e) => FINISH_EVENTS.has(e.type)).length;
  const ledger = await o.ledger.read();
  const ends = ledger.ends(o.mark);
  o.bothEnded = o.secondPid !== undefined && ends.includes(holder.pid) && ends.includes(o.secondPid);
  // The first holder's run ended (its command had exited) when it logged the run's result.
  const at = (action: string) => logTime(holder.lines.find((l) => l.work_order_id === o.id && l.action === action));
  o.lostAt = at("lease_lost");
  o.stoppedAt = at("execute");
  const stoppedFirst = o.secondPid !== undefined && ledger.before("stop", holder.pid, "start", o.secondPid, o.mark);
  o.ranOn =
    ends.includes(holder.pid) || !stoppedFirst || o.stoppedAt === undefined || o.leaseEnd === undefined || o.stoppedAt >= o.leaseEnd;
}

function logTime(l: AgentLogLine | undefined): number | undefined {
  const t = l?.timestamp ? Date.parse(l.timestamp) : Number.NaN;
  return Number.isNaN(t) ? undefined : t;
}

/** True when the order's accepted result came from the first holder's run. */
function acceptedFrom(o: WorkOrder, pid: number, token: bigint | undefined): boolean {
  const out = o.result?.details?.command?.stdout ?? "";
  return out.includes(`holder ${pid}\n`) || (token !== undefined && o.claim?.fencingToken === token);
}

function figures(section: string, label: string, n: number, runs: OrderRun[]): Figure[] {
  const count = (f: (o: OrderRun) => boolean) => runs.filter(f).length;
  const ofAll = (name: string, f: (o: OrderRun) => boolean) => exactly(section, name, count(f), n, n);
  const none = (name: string, f: (o: OrderRun) => boolean) => exactly(section, name, count(f), 0, n);
  const takeovers = runs.flatMap((o) => (o.takeoverMs === undefined ? [] : [o.takeoverMs / 1000])).sort((x, y) => x - y);
  // See the top of this file: measured in the SIGSTOP run, barred in the partition run.
  const both =
    label === "SIGSTOP"
      ? [
          info(
            section,
            "orders whose command ran to its end under both holders (a frozen agent's child is not frozen)",
            `${fmt(count((o) => o.bothEnded))} of ${fmt(runs.length)}`,
          ),
        ]
      : [
          none(
            "orders whose command ran on after the lease was lost (not stopped before the lease ended at the controller)",
            (o) => o.ranOn,
          ),
          info(
            section,
            "command stopped after the agent found its lease lost: p50 / max",
            spread(runs.map((o) => (o.stoppedAt !== undefined && o.lostAt !== undefined ? o.stoppedAt - o.lostAt : undefined))),
          ),
          info(
            section,
            `command stopped before the lease ended at the controller (lease ${LEASE}): p50 / least`,
            spread(
              runs.map((o) => (o.stoppedAt !== undefined && o.leaseEnd !== undefined ? o.leaseEnd - o.stoppedAt : undefined)),
              true,
            ),
          ),
        ];
  return [
    exactly(section, "orders tried", runs.length, n),
    ofAll("leases lapsed and taken over by the other agent", (o) => o.takenOver),
    ofAll("late results of the first holder refused", (o) => o.staleRefused),
    none("results accepted from a stale holder", (o) => o.staleAccepted),
    none("orders finished more than once", (o) => o.finishEvents > 1),
    none("orders that never finished", (o) => !o.finished),
    ...both,
    info(
      section,
      `takeover after the cut (lease ${LEASE}): p50 / max`,
      takeovers.length ? `${percentile(takeovers, 50).toFixed(1)} s / ${takeovers[takeovers.length - 1]!.toFixed(1)} s` : "none",
    ),
  ];
}

/** "p50 / max" (or "p50 / least") of millisecond figures, in ms. */
function spread(ms: (number | undefined)[], least = false): string {
  const xs = ms.filter((x): x is number => x !== undefined).sort((a, b) => a - b);
  if (xs.length === 0) return "none";
  return `${Math.round(percentile(xs, 50))} ms / ${Math.round(least ? xs[0]! : xs[xs.length - 1]!)} ms`;
}

function agentOptions(dir: string, name: string, controllerUrl: string, ctl: ControllerProcess, token: string) {
  return {
    name,
    controllerUrl,
    caFile: join(ctl.dataDir, "tls", "ca.crt"),
    nodeId: NODE,
    token,
    dir: join(dir, `agent-${name}`),
    allowCommands: ["sh"],
  };
}

/** The ledger the orders' commands append to: "start|end <mark> <agent pid>" lines. */
class Ledger {
  constructor(readonly path: string) {}

  async read(): Promise<LedgerLines> {
    return new LedgerLines(await readFile(this.path, "utf8"));
  }

  /** Rereads the ledger until `f` of it is defined (or true), within `timeoutMs`. */
  async waitFor<T>(f: (l: LedgerLines) => T | false | undefined, timeoutMs: number): Promise<T | undefined> {
    return waitUntil(
      async () => {
        const v = f(await this.read());
        return v === false ? undefined : v;
      },
      timeoutMs,
      50,
    );
  }
}

class LedgerLines {
  private readonly lines: { what: string; mark: string; pid: number }[];

  constructor(text: string) {
    this.lines = text
      .split("\n")
      .map((l) => l.trim().split(" "))
      .filter((p) => p.length === 3)
      .map(([what, mark, pid]) => ({ what: what!, mark: mark!, pid: Number(pid) }));
  }

  /** The agent pids that started `mark`, in order. */
  starts(mark: string): number[] {
    return this.lines.filter((l) => l.what === "start" && l.mark === mark).map((l) => l.pid);
  }

  /** True when `what` of pid `a` comes before `then` of pid `b` in `mark`'s lines. */
  before(what: string, a: number, then: string, b: number, mark: string): boolean {
    const at = (w: string, pid: number) => this.lines.findIndex((l) => l.what === w && l.mark === mark && l.pid === pid);
    const first = at(what, a);
    const second = at(then, b);
    return first >= 0 && (second < 0 || first < second);
  }

  /** The agent pids whose run of `mark` reached its end. */
  ends(mark: string): number[] {
    return this.lines.filter((l) => l.what === "end" && l.mark === mark).map((l) => l.pid);
  }
}
