// Memory held by stalled streams, on every door a body can come through. Unauthenticated: every
// open method of the contract (PUBLIC or ENROLL, found from the descriptors, so a new one is
// covered) on every protocol that reaches it — its REST routes, Connect unary JSON, gRPC and
// gRPC-Web — gets 1,000 streams over 10 HTTP/2 connections, each sending a body just under the
// open cap (or an envelope announcing the cap, nearly all of it sent) and never ending it.
// Authenticated: a node's token, 4 MiB bodies on NodeService.Heartbeat over gRPC and REST.
// Measured: the memory the controller holds while they are held, above what it held before (idle,
// after a warm-up of as much traffic), both read after a full GC over its inspector
// (inspector.ts: RSS also counts garbage not yet collected, and swings 0-36 MB for the same case
// with GC timing; it is shown beside, as information); how many were answered at once and how many held; and, waiting for the
// answers as they come (bounded), how many were still held past their class's body deadline. Each
// case ends its bodies before the next, so the server gives back what they reserved; one check
// resets them instead and watches whether the address's budget comes back. The short run (CI)
// sends fewer admitted streams, waits for the open deadline once for all open cases together (4
// streams each) and not at all for the admitted 60 s one.
import { join } from "node:path";
import { HealthService } from "../../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { DEFAULT_BODY_LIMITS } from "../../controller/boundary/body-limits.js";
// Every service the controller serves, from the controller's own list of generated descriptors.
import { SERVICES } from "../../controller/server/build.js";
import { atMost, exactly, fmt, info, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { openMethods, stallTargets, type StallTarget } from "./stall-targets.js";
import { waitUntil } from "./wait-until.js";
import { answersOf, heldAt, openStalled, waitClosed, withTimeout, type Stalled, type StreamSeen } from "./stalled-streams.js";

const SECTION = "stalled streams";
const { open: OPEN, admitted: ADMITTED } = DEFAULT_BODY_LIMITS;
// How far past its deadline an answer may come (timers, a busy machine) and still meet the bar.
const MARGIN_MS = 3000;
// Bound on sending every body (or being answered) and on the ping after.
const SEND_BOUND_MS = 30_000;
const MB = (n: number) => Math.max(0, Math.round(n));

export const stalledMemoryProbe: Probe = {
  name: "stalled-memory",
  async run({ short, workDir, log }) {
    const ctl = await startController({ dataDir: join(workDir, "data"), inspect: true });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: "stall-node" })).token;
    const figures: Figure[] = [];
    const targets = openMethods(SERVICES).flatMap((m) => stallTargets(m, OPEN.maxBytes));
    log(`${targets.length} open cases: ${targets.map((t) => `${t.method} ${t.protocol}`).join(", ")}`);
    await warmUp(ctl, log);
    for (const t of targets) figures.push(...(await openCase(ctl, t, !short, log)));
    if (short) figures.push(await openDeadlinesTogether(ctl, targets, log));
    figures.push(...(await mostHeld(ctl, short, log)));
    figures.push(await budgetAfterReset(ctl, targets.find((t) => t.protocol === "Connect JSON")!, log));
    figures.push(...(await admittedCase(ctl, token, short, log)));
    figures.push(exactly(SECTION, "controller down afterwards", ctl.alive() ? 0 : 1, 0));
    await ctl.stop();
    return figures;
  },
};

/** 1,000 streams on 10 connections at one open target: what was answered, RSS while held, and (full run) the deadline. */
async function openCase(ctl: ControllerProcess, t: StallTarget, waitDeadline: boolean, log: (m: string) => void): Promise<Figure[]> {
  const name = `no credential, ${t.method}, ${t.protocol} ${t.route}`;
  const sent = `1,000 streams on 10 connections, each ${t.sends}, never ended`;
  const idle = await sample(ctl);
  const held = await openStalled(
    { url: ctl.url, ca: ctl.ca, connections: 10, streamsPerConnection: 100, headers: t.headers, body: t.body },
    SEND_BOUND_MS,
  );
  const during = await sample(ctl);
  const figures = [sentFigure(name, sent, held), ...memoryFigures(name, idle, during, 16)];
  log(`${name}: ${summary(held.streams)}; ${memoryText(idle, during)}`);
  if (waitDeadline) figures.push(await deadlineFigure(name, held.streams, unanswered(held.streams), OPEN.deadlineMs, log));
  await release(ctl, held, log);
  return figures;
}

/**
 * The most a client without a credential can make the controller hold: more connections than the
 * pool of unvouched ones takes (from 8 addresses), each with more streams than such a connection
 * may open, each sending one byte and never ending. Bar: 64 MB held in all.
 */
async function mostHeld(ctl: ControllerProcess, short: boolean, log: (m: string) => void): Promise<Figure[]> {
  const [addresses, perAddress, streams] = short ? [4, 80, 16] : [8, 40, 16];
  const name = `no credential, the most it can hold: ${fmt(addresses * perAddress)} connections from ${addresses} addresses, ${streams} streams each, 1 byte of an enrollment body sent on each (POST /v1/enroll), never ended`;
  const idle = await sample(ctl);
  const held: Stalled[] = [];
  for (let a = 1; a <= addresses; a++) {
    const plan = { url: ctl.url, ca: ctl.ca, connections: perAddress, streamsPerConnection: streams, localAddress: `127.0.0.${a}` };
    held.push(
      await openStalled(
        { ...plan, headers: { ":method": "POST", ":path": "/v1/enroll", "content-type": "application/json" }, body: Buffer.from("{") },
        SEND_BOUND_MS,
      ),
    );
  }
  const during = await sample(ctl);
  const all = held.flatMap((h) => h.streams);
  log(`${name}: ${summary(all)}; ${memoryText(idle, during)}`);
  const figures = [info(SECTION, `${name}: what the server did`, summary(all)), ...memoryFigures(name, idle, during, 64)];
  for (const h of held) await h.close(5000);
  return figures;
}

/** Short run: 4 streams at every open target at once, each on its own connection, and one wait for the open deadline. */
async function openDeadlinesTogether(ctl: ControllerProcess, targets: StallTarget[], log: (m: string) => void): Promise<Figure> {
  const all = await Promise.all(
    targets.map((t) =>
      openStalled({ url: ctl.url, ca: ctl.ca, connections: 1, streamsPerConnection: 4, headers: t.headers, body: t.body }, SEND_BOUND_MS),
    ),
  );
  const streams = all.flatMap((h) => h.streams);
  const name = `no credential, every open case at once (short: 4 streams each, ${streams.length} in all)`;
  const figure = await deadlineFigure(name, streams, unanswered(streams), OPEN.deadlineMs, log);
  for (const h of all) await release(ctl, h, log);
  return figure;
}

/** A node's token, 4 MiB bodies on Heartbeat over gRPC, then REST (from 127.0.0.2, its own address budget) with the gRPC ones still held. */
async function admittedCase(ctl: ControllerProcess, token: string, short: boolean, log: (m: string) => void): Promise<Figure[]> {
  const targets = stallTargets(
    NodeService.method.heartbeat,
    ADMITTED.maxBytes,
    { authorization: `Bearer ${token}` },
    { node_id: "stall-node" },
  );
  const grpc = targets.find((t) => t.protocol === "gRPC")!;
  const rest = targets.find((t) => t.protocol === "REST");
  // One stream per connection: with several 4 MiB bodies on one connection Node's own HTTP/2
  // session memory cap (10 MB) resets most of them (ENHANCE_YOUR_CALM) before the body limits act.
  const [connections, perConnection] = short ? [20, 1] : [100, 1];
  const count = `${connections * perConnection} streams on ${connections} connections`;
  const figures: Figure[] = [];
  const idle = await sample(ctl);
  const plan = { url: ctl.url, ca: ctl.ca, connections, streamsPerConnection: perConnection };
  const grpcName = `node token, ${grpc.method}, gRPC ${grpc.route}`;
  const grpcHeld = await openStalled({ ...plan, headers: grpc.headers, body: grpc.body }, SEND_BOUND_MS);
  const grpcMem = await sample(ctl);
  log(`${grpcName}: ${summary(grpcHeld.streams)}; ${memoryText(idle, grpcMem)}`);
  figures.push(sentFigure(grpcName, `${count}, each ${grpc.sends}, never ended`, grpcHeld), ...memoryFigures(grpcName, idle, grpcMem, 256));
  const holds: [string, Stalled, Set<StreamSeen>][] = [[grpcName, grpcHeld, unanswered(grpcHeld.streams)]];
  if (rest) {
    const restName = `node token, ${rest.method}, REST ${rest.route} from 127.0.0.2`;
    const restHeld = await openStalled({ ...plan, headers: rest.headers, body: rest.body, localAddress: "127.0.0.2" }, SEND_BOUND_MS);
    const bothMem = await sample(ctl);
    log(`${restName}: ${summary(restHeld.streams)}; ${memoryText(idle, bothMem)} (gRPC streams still held)`);
    figures.push(
      sentFigure(restName, `${count}, each ${rest.sends}, never ended`, restHeld),
      ...memoryFigures(`${restName}, with the gRPC streams still held`, idle, bothMem, 256),
    );
    holds.push([restName, restHeld, unanswered(restHeld.streams)]);
  }
  if (short) {
    log(`short: the admitted ${ADMITTED.deadlineMs / 1000} s body deadline is not waited for`);
  } else {
    // One wait for both (they overlap), each protocol's streams counted against its own start.
    await waitClosed(
      holds.flatMap(([, h]) => h.streams).filter((s) => !s.queued),
      lastStart(holds.flatMap(([, h]) => h.streams)) + ADMITTED.deadlineMs + MARGIN_MS,
    );
    for (const [name, h, held] of holds) figures.push(await deadlineFigure(name, h.streams, held, ADMITTED.deadlineMs, log));
  }
  for (const [, h] of holds) await release(ctl, h, log);
  return figures;
}

/** Whether every body was sent in full or answered, and the server read it (a ping came back); the answers. */
function sentFigure(name: string, sent: string, held: Stalled): Figure {
  const unsent = held.streams.filter((s) => s.sentAt === undefined && s.answeredAt === undefined).length;
  const value = `${summary(held.streams)}${unsent > 0 ? `; ${unsent} neither sent nor answered in ${SEND_BOUND_MS / 1000} s` : ""}${held.pinged ? "" : "; ping lost"}`;
  return { section: SECTION, name: `${name}: ${sent}`, value, target: "every body sent or answered", ok: held.sendsDone && held.pinged };
}

interface Memory {
  /** MB live after a full GC. */
  live: number;
  /** RSS in MB at the same moment. */
  rss: number;
}

/** What the controller holds now: live after a full GC, and its RSS. */
async function sample(ctl: ControllerProcess): Promise<Memory> {
  const live = await ctl.liveMb();
  return { live, rss: ctl.rssMb() };
}

/** The bar on memory held (live after a full GC) above idle; RSS above idle beside it, as information. */
function memoryFigures(name: string, idle: Memory, during: Memory, max: number): Figure[] {
  return [
    atMost(
      SECTION,
      `${name}: memory held (live after a full GC) above idle (${fmt(idle.live)} MB after the warm-up)`,
      MB(during.live - idle.live),
      max,
      "MB",
    ),
    info(SECTION, `${name}: RSS above idle (${fmt(idle.rss)} MB; counts garbage not yet collected)`, `${MB(during.rss - idle.rss)} MB`),
  ];
}

function memoryText(idle: Memory, during: Memory): string {
  return `held ${fmt(idle.live)} -> ${fmt(during.live)} MB, RSS ${fmt(idle.rss)} -> ${fmt(during.rss)} MB`;
}

/**
 * Waits (bounded) until every stream is answered; the figure counts those still held past
 * `deadlineMs` + the margin, and says when those `held` after the send were answered.
 */
async function deadlineFigure(
  name: string,
  streams: StreamSeen[],
  held: Set<StreamSeen>,
  deadlineMs: number,
  log: (m: string) => void,
): Promise<Figure> {
  const opened = streams.filter((s) => !s.queued);
  await waitClosed(opened, lastStart(streams) + deadlineMs + MARGIN_MS);
  const late = heldAt(streams, (s) => s.startedAt + deadlineMs + MARGIN_MS);
  const answeredLater = streams.filter((s) => held.has(s) && s.answeredAt !== undefined);
  const times = answeredLater.map((s) => (s.answeredAt! - s.startedAt) / 1000);
  const span = times.length > 0 ? `${fmt(Math.min(...times))}-${fmt(Math.max(...times))} s` : "none";
  const open = opened.filter((s) => s.closedAt === undefined).length;
  const detail = `held ones answered after ${span} (${answersOf(answeredLater)}); ${fmt(open)} still open then (answered, not closed)`;
  log(`${name}: ${late.length} held past ${deadlineMs / 1000} s + ${MARGIN_MS / 1000} s; ${detail}`);
  return {
    section: SECTION,
    name: `${name}: held past the ${deadlineMs / 1000} s body deadline + ${MARGIN_MS / 1000} s`,
    value: `${fmt(late.length)} of ${fmt(streams.length)}; ${detail}`,
    target: "0",
    ok: late.length === 0,
  };
}

/** "936 answered at once (grpc-status 8 ×936), 64 held". */
function summary(streams: StreamSeen[]): string {
  const answered = streams.filter((s) => s.answeredAt !== undefined);
  const queued = streams.filter((s) => s.queued).length;
  const held = streams.length - answered.length - queued;
  return `${fmt(answered.length)} answered at once (${answersOf(answered)}), ${fmt(queued)} never opened (the server's stream limit for a connection no credential vouched for), ${fmt(held)} held`;
}

// The streams the server holds: opened and not answered (queued ones never reached it).
function unanswered(streams: StreamSeen[]): Set<StreamSeen> {
  return new Set(streams.filter((s) => s.answeredAt === undefined && !s.queued));
}

function lastStart(streams: StreamSeen[]): number {
  return Math.max(...streams.map((s) => s.startedAt));
}

/**
 * 1,000 streams of 16 KiB to GET /v1/health on 10 connections, answered and ended, before idle RSS
 * is taken: the first such traffic grows V8's heap (and RSS) by some 30-50 MB of garbage that the
 * next case would otherwise be charged with, whatever it holds.
 */
async function warmUp(ctl: ControllerProcess, log: (m: string) => void): Promise<void> {
  const before = ctl.rssMb();
  const headers = { ":method": "GET", ":path": "/v1/health" };
  const body = Buffer.alloc(OPEN.maxBytes - 16, 0x61);
  const warm = await openStalled({ url: ctl.url, ca: ctl.ca, connections: 10, streamsPerConnection: 100, headers, body }, SEND_BOUND_MS);
  await release(ctl, warm, log);
  log(
    `warm-up (1,000 streams of ${body.length} B to GET /v1/health on 10 connections, ended): RSS ${fmt(before)} -> ${fmt(ctl.rssMb())} MB`,
  );
}

/**
 * Whether an address's open budget comes back when its client resets its stalled streams: 64
 * full bodies (its 1 MiB) from 127.0.0.3, reset; then, until the open deadline + the margin has
 * passed, 64 more from the same address on new connections, until none is refused.
 */
async function budgetAfterReset(ctl: ControllerProcess, t: StallTarget, log: (m: string) => void): Promise<Figure> {
  const plan = {
    url: ctl.url,
    ca: ctl.ca,
    // 8 streams each: what a connection no credential vouched for may open at once.
    connections: 8,
    streamsPerConnection: 8,
    headers: t.headers,
    body: t.body,
    localAddress: "127.0.0.3",
  };
  const fill = await openStalled(plan, SEND_BOUND_MS);
  const filled = unanswered(fill.streams).size;
  await fill.close(5000);
  const resetAt = performance.now();
  let lastRefused = 0;
  const back = await waitUntil(
    async () => {
      const again = await openStalled(plan, SEND_BOUND_MS);
      lastRefused = again.streams.length - unanswered(again.streams).size;
      await release(ctl, again, log);
      return lastRefused === 0 ? performance.now() - resetAt : undefined;
    },
    OPEN.deadlineMs + MARGIN_MS,
    500,
  );
  const value =
    back === undefined
      ? `not within ${fmt((OPEN.deadlineMs + MARGIN_MS) / 1000)} s (${lastRefused} of 64 refused at the last try)`
      : `after ${fmt(back / 1000)} s`;
  log(`budget after reset: ${filled} of 64 held, reset; 64 more held again ${value}`);
  return {
    section: SECTION,
    name: `no credential, ${t.method}, ${t.protocol} ${t.route} from 127.0.0.3: ${filled} stalled streams of ${t.sends} (the address's ${OPEN.perAddress / 1024} KiB budget) reset by the client, then 64 more held again`,
    value,
    target: `within ${fmt((OPEN.deadlineMs + MARGIN_MS) / 1000)} s`,
    ok: back !== undefined,
  };
}

/**
 * Ends every stream's body (so the server reads to the end and answers it, as it would a finished
 * call), closes the connections, then one health check on a new one. A stream reset mid-body is
 * not how a case ends: budgetAfterReset measures what that leaves behind.
 */
async function release(ctl: ControllerProcess, held: Stalled, log: (m: string) => void): Promise<void> {
  if (!(await held.end(15_000))) log("streams not closed within 15 s of ending their bodies");
  if (!(await held.close(5000))) log("connections not closed within 5 s");
  if ((await withTimeout(ctl.client(HealthService).check({}), 10_000)) === undefined) log("health check unanswered within 10 s");
}
