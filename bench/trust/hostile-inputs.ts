// Hostile input at every door: every RPC of every service the controller serves and every REST
// route derived from the same contract (hostile-requests.ts), over Connect (JSON, binary, GET,
// streaming), gRPC, gRPC-Web and REST, on HTTP/2 and HTTP/1.1, without a credential, with a wrong
// one, a node's and the admin's (so admitted paths are exercised, not only refusals), carrying
// what no client should send (hostile-bodies.ts). Counted apart: HTTP 5xx, RPC-level INTERNAL or
// UNKNOWN statuses (an HTTP 200 can carry one), requests left unanswered (hangs), dropped streams;
// then whether the controller survived, its credentials still work, files appeared outside its
// data directory, and its memory before and after. The first offenders of each are logged.
import http2 from "node:http2";
import https from "node:https";
import { readdir } from "node:fs/promises";
import { join, relative } from "node:path";
import { HealthService } from "../../gen/skipper/v1/health_service_pb.js";
import { NodeService } from "../../gen/skipper/v1/node_service_pb.js";
import { AccessService } from "../../gen/skipper/v1/access_service_pb.js";
import { SERVICES } from "../../controller/server/build.js";
import { deriveRoutes } from "../../controller/boundary/rest/route-table.js";
import { atMost, exactly, fmt, info, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { describe, type Attempt } from "./hostile-attempt.js";
import { send, type Answer } from "./hostile-answers.js";
import { hostileRequests, sample } from "./hostile-requests.js";

const SECTION = "hostile input";
// An answer slower than this is a hang (the server's own limits close stalled requests in 60 s).
const HANG_MS = 10_000;
const SHORT_SIZE = 2_000;
const FULL_MIN = 20_000;
// Offenders logged of each kind.
const SHOWN = 8;
const WORKERS = 8;

export const hostileInputsProbe: Probe = {
  name: "hostile-inputs",
  async run({ short, workDir, log }) {
    const dataDir = join(workDir, "data");
    const ctl = await startController({ dataDir, cwd: join(workDir, "cwd"), inspect: true });
    const nodeToken = (await ctl.admin(NodeService).registerNode({ nodeId: "hostile-node" })).token;
    const before = await listFiles(workDir, dataDir);
    const rssBefore = ctl.rssMb();
    // What the controller holds, after a full GC (RSS also counts garbage not yet collected).
    const liveBefore = await ctl.liveMb();
    const all = hostileRequests(nodeToken);
    const chosen = short ? sample(all, SHORT_SIZE) : all;
    log(`${fmt(chosen.length)} requests of ${fmt(all.length)}`);
    const started = performance.now();
    const tally = await sweep(ctl, chosen, log);
    const seconds = (performance.now() - started) / 1000;
    const alive = ctl.alive();
    const health = alive && (await answers(() => ctl.client(HealthService).check({})));
    // The sweep must not have broken itself: the credentials it sends still admit.
    const adminWorks = alive && (await answers(() => ctl.admin(AccessService).whoAmI({})));
    const nodeWorks = alive && (await answers(() => ctl.client(NodeService, nodeToken).heartbeat({ nodeId: "hostile-node" })));
    const rssAfter = alive ? ctl.rssMb() : NaN;
    const liveAfter = alive ? await ctl.liveMb().catch(() => NaN) : NaN;
    await ctl.stop();
    const after = await listFiles(workDir, dataDir);
    const outside = [...after].filter((f) => !before.has(f) && !/^controller-\d+\.out$/.test(f));
    if (outside.length) log(`outside the data dir: ${outside.join(", ")}`);
    const missing = uncovered(chosen);
    if (missing.length) log(`not attacked: ${missing.join(", ")}`);
    const n = chosen.length;
    const least = short ? Math.min(SHORT_SIZE * 0.75, all.length) : FULL_MIN;
    return [
      {
        section: SECTION,
        name: `requests sent (${short ? "short" : "full"} run), in ${fmt(Math.round(seconds))} s`,
        value: fmt(n),
        target: `≥ ${fmt(least)}`,
        ok: n >= least,
      },
      info(
        SECTION,
        "by protocol",
        counts(chosen, (a) => `${a.protocol}${a.http1 ? " h1" : ""}`),
      ),
      info(
        SECTION,
        "by category",
        counts(chosen, (a) => a.category),
      ),
      info(
        SECTION,
        "by credential",
        counts(chosen, (a) => a.credential),
      ),
      exactly(SECTION, "RPCs and REST routes of the contract not attacked", missing.length, 0),
      info(SECTION, "answers by class", join2(tally.classes)),
      info(SECTION, "RPC-level statuses (most frequent)", join2(tally.rpc, 12)),
      exactly(SECTION, "5xx answers", tally.fiveHundreds, 0, n),
      exactly(SECTION, "RPC-level INTERNAL or UNKNOWN statuses (gRPC 13/2, Connect, REST envelope)", tally.internal, 0, n),
      exactly(SECTION, `requests unanswered after ${HANG_MS / 1000} s`, tally.classes.get("hang") ?? 0, 0, n),
      exactly(SECTION, "requests dropped without an answer (stream or connection reset)", tally.classes.get("reset") ?? 0, 0, n),
      info(SECTION, "requests the client itself would not send", fmt(tally.classes.get("unsendable") ?? 0)),
      info(SECTION, "sessions the server ended (GOAWAY code: count)", join2(tally.goaways) || "none"),
      exactly(SECTION, "controller crashed or stopped answering", alive && health ? 0 : 1, 0),
      exactly(SECTION, "credentials the sweep broke (admin, node)", (adminWorks ? 0 : 1) + (nodeWorks ? 0 : 1), 0),
      exactly(SECTION, "files written outside the data directory", outside.length, 0),
      info(SECTION, "controller RSS before → after", `${fmt(Math.round(rssBefore))} → ${fmt(Math.round(rssAfter))} MB`),
      info(
        SECTION,
        "controller memory held (live after a full GC) before → after",
        `${fmt(Math.round(liveBefore))} → ${fmt(Math.round(liveAfter))} MB`,
      ),
      atMost(SECTION, "memory held growth (live after a full GC)", Math.max(0, Math.round(liveAfter - liveBefore)), 150, "MB"),
    ] satisfies Figure[];
  },
};

interface Tally {
  classes: Map<string, number>;
  rpc: Map<string, number>;
  goaways: Map<string, number>;
  fiveHundreds: number;
  internal: number;
}

/** Sends `attempts` from a few workers, each on its own connections, and counts the answers. */
async function sweep(ctl: ControllerProcess, attempts: Attempt[], log: (m: string) => void): Promise<Tally> {
  const tally: Tally = { classes: new Map(), rpc: new Map(), goaways: new Map(), fiveHundreds: 0, internal: 0 };
  const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);
  const opened = () => {
    const s = http2.connect(ctl.url, { ca: ctl.ca });
    s.on("error", () => undefined);
    s.on("goaway", (code) => bump(tally.goaways, String(code)));
    return s;
  };
  const record = (a: Attempt, r: Answer) => {
    const cls = typeof r.http === "number" ? `${String(r.http)[0]}xx` : r.http;
    bump(tally.classes, cls);
    if (r.rpc) bump(tally.rpc, r.rpc);
    const offence = typeof r.http === "number" && r.http >= 500 ? "5xx" : r.http === "hang" || r.http === "reset" ? r.http : undefined;
    if (offence === "5xx") tally.fiveHundreds++;
    if (r.internal) tally.internal++;
    const shown = offence === "5xx" ? tally.fiveHundreds : r.internal ? tally.internal : (tally.classes.get(cls) ?? 0);
    if ((offence || r.internal) && shown <= SHOWN) {
      log(
        `${r.internal ? "INTERNAL/UNKNOWN" : offence}: ${describe(a)} -> ${r.http}${r.rpc ? ` ${r.rpc}` : ""} ${JSON.stringify(r.detail.slice(0, 200))}`,
      );
    }
  };
  // A few workers at a time, each on its own connection, renewed every few requests and for each
  // large upload: Node's HTTP/2 server rejects new streams on a connection that holds more than
  // 10 MB (maxSessionMemory) and ends it after 100 rejections, which would keep later inputs from
  // reaching the controller at all (that protection is the client's own loss).
  const queue = attempts.values();
  const worker = async () => {
    let s = opened();
    // A connection of its own for each HTTP/1.1 request: a kept-alive socket the server closed
    // after a refusal (its body unread) resets the next request sent on it before it is read.
    const agent = new https.Agent({ ca: ctl.ca, keepAlive: false });
    let used = 0;
    for (const a of queue) {
      const large = a.body.length > 1024 * 1024;
      if (large || used >= 20 || s.closed || s.destroyed) {
        s.close();
        s = opened();
        used = 0;
      }
      used++;
      record(a, await send(a, s, agent, ctl.url, HANG_MS));
      if (large) {
        s.destroy();
        s = opened();
        used = 0;
      }
    }
    s.close();
    agent.destroy();
  };
  await Promise.all(Array.from({ length: WORKERS }, worker));
  return tally;
}

/** The RPCs and REST routes of the contract that no attempt in `attempts` targets. */
function uncovered(attempts: Attempt[]): string[] {
  const targets = new Set(attempts.map((a) => a.target));
  const rpcs = SERVICES.flatMap((s) => s.methods.map((m) => `${s.name}.${m.name}`));
  const routes = deriveRoutes(SERVICES).map((r) => `REST ${r.httpMethod} ${r.template}`);
  return [...rpcs, ...routes].filter((t) => !targets.has(t));
}

function counts(attempts: Attempt[], key: (a: Attempt) => string): string {
  const m = new Map<string, number>();
  for (const a of attempts) m.set(key(a), (m.get(key(a)) ?? 0) + 1);
  return join2(m);
}

/** "k n, k n" by count, the largest first. */
function join2(m: Map<string, number>, limit = 50): string {
  return [...m]
    .sort((a, b) => b[1] - a[1])
    .slice(0, limit)
    .map(([k, v]) => `${k} ${fmt(v)}`)
    .join(", ");
}

async function answers(call: () => Promise<unknown>): Promise<boolean> {
  const timeout = new Promise<false>((r) => setTimeout(() => r(false), HANG_MS).unref());
  return Promise.race([
    call().then(
      () => true,
      () => false,
    ),
    timeout,
  ]);
}

/** Every file under `root` outside `dataDir`, as relative paths. */
async function listFiles(root: string, dataDir: string): Promise<Set<string>> {
  const out = new Set<string>();
  const walk = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const p = join(dir, e.name);
      if (p === dataDir) continue;
      if (e.isDirectory()) await walk(p);
      else out.add(relative(root, p));
    }
  };
  await walk(root);
  return out;
}
