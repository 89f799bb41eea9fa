// skippy-updater's state machine, pure: step(state, event, now) -> (next state, actions). The
// updater (updater.ts) feeds it events (a request file seen, a validation's result, the child's
// exit, a confirmation file, the clock) and runs the actions it returns, in order.
//
//   IDLE ──request──> STAGED ──valid──> SWITCHING ──old child exited──> STARTING ──confirmed──> CONFIRMED
//                       │ invalid/late     │ no exit after SIGKILL          │ deadline / crash loop
//                       v                  v                                v
//                     FAILED            FAILED                       ROLLING_BACK ──previous confirmed──> ROLLED_BACK
//                                                                           │ deadline
//                                                                           v
//                                                                         FAILED (keeps running previous)
//
// At rest (IDLE, CONFIRMED, ROLLED_BACK, FAILED) the machine waits for nothing: it keeps the
// child running (restarts with backoff) and takes the next request at once. Every other state has
// a deadline, so a request stuck in one never blocks the next: STAGED gives validation a few
// seconds; SWITCHING waits for the old agent to stop, then kills it, then gives up; STARTING gives
// the new agent the request's deadline to confirm (and counts its exits: a crash loop fails it
// early); ROLLING_BACK gives the previous version a deadline to confirm again. While an update is
// under way (SWITCHING, STARTING, ROLLING_BACK) a request is left in its file and taken when the
// machine is at rest again: a newer request overwrites it, so the latest wins. In STAGED a newer
// request replaces the staged one at once (nothing has been switched yet). A request older than its
// deadline is dropped; a failed link switch ends in FAILED on the version that ran before.
import type { UpdateRequest, UpdaterStateFile, UpdaterStateName, VersionRef } from "./update-files.js";
import { versionDirName } from "./update-files.js";

/** A version and its directory under versions/. */
export interface Slot extends VersionRef {
  dir: string;
}

/** The machine's timings. */
export interface MachineConfig {
  /** STAGED: how long validating a staged bundle may take. */
  validateTimeoutMs: number;
  /** SWITCHING / ROLLING_BACK: from SIGTERM to SIGKILL of the child. */
  stopTimeoutMs: number;
  /** From SIGKILL to giving up on the child's exit. */
  killTimeoutMs: number;
  /** ROLLING_BACK: how long the previous version has to confirm again. */
  rollbackConfirmMs: number;
  /** STARTING: this many exits of the new agent fail it before its deadline. */
  crashLoopExits: number;
  /** Restart backoff of the child: base * 2^n, at most cap; reset after a run of stableRunMs. */
  restartBaseMs: number;
  restartCapMs: number;
  stableRunMs: number;
  /** STARTING's deadline when a request (or a recovered state) names none. */
  defaultDeadlineMs: number;
}

export const DEFAULT_MACHINE_CONFIG: MachineConfig = {
  validateTimeoutMs: 10_000,
  // The agent finishes the order it runs on SIGTERM; the service unit gives the whole stop 90 s.
  stopTimeoutMs: 80_000,
  killTimeoutMs: 5_000,
  rollbackConfirmMs: 120_000,
  crashLoopExits: 3,
  restartBaseMs: 1_000,
  restartCapMs: 30_000,
  stableRunMs: 60_000,
  defaultDeadlineMs: 120_000,
};

/** The child process as the machine knows it. */
export interface ChildView {
  running: boolean;
  /** When it was last started (ms). */
  startedAt: number;
  /** Consecutive short runs (for the backoff). */
  quickExits: number;
  /** When to start it again, when it is not running. */
  restartAt: number | undefined;
  /** SIGKILL was sent in this stop. */
  killed: boolean;
}

export interface MachineState {
  name: UpdaterStateName;
  /** When the state times out (ms); undefined at rest. */
  deadlineAt: number | undefined;
  /** What `current` points at. */
  running: Slot | undefined;
  /** The version to go back to. */
  previous: Slot | undefined;
  /** The version the last update went to (or tried to). */
  target: Slot | undefined;
  /** The request's deadline for STARTING, and its order. */
  deadlineMs: number;
  orderId: string;
  /** Why (ROLLED_BACK, FAILED, the reason of ROLLING_BACK) or what happens. */
  message: string;
  changedAt: number;
  /** STARTING: exits of the new agent so far. */
  startingExits: number;
  /** SWITCHING / ROLLING_BACK: waiting for the child to exit before switching. */
  stopping: boolean;
  child: ChildView;
}

export type MachineEvent =
  | { type: "request"; request: UpdateRequest }
  | { type: "requestInvalid"; message: string }
  | { type: "validated"; sha256: string; error?: string }
  | { type: "childExited"; code: number | null; signal: string | null }
  | { type: "confirmed"; sha256: string }
  /** The switchLinks action of the last step failed: nothing after it ran. */
  | { type: "switchFailed"; message: string }
  | { type: "tick" };

export type MachineAction =
  | { type: "validate"; target: Slot }
  | { type: "stopChild" }
  | { type: "killChild" }
  | { type: "switchLinks"; current: string; previous?: string }
  | { type: "startChild"; slot: Slot }
  | { type: "writeState" }
  /** Removes old version directories (after CONFIRMED or ROLLED_BACK). */
  | { type: "prune" }
  | { type: "log"; message: string };

export interface Step {
  state: MachineState;
  actions: MachineAction[];
}

const AT_REST: readonly UpdaterStateName[] = ["IDLE", "CONFIRMED", "ROLLED_BACK", "FAILED"];

/** True for the states that wait for nothing. */
export function atRest(name: UpdaterStateName): boolean {
  return AT_REST.includes(name);
}

/** True for the states in which the driver takes request.json (renames it, then reads it). */
export function takesRequests(name: UpdaterStateName): boolean {
  return atRest(name) || name === "STAGED";
}

/** The slot of a version ref. */
export function slotOf(ref: VersionRef): Slot {
  return { version: ref.version, sha256: ref.sha256, dir: versionDirName(ref.version, ref.sha256) };
}

/** The machine at rest running `running`, before its child starts. */
export function initialState(running: Slot | undefined, now: number): MachineState {
  return {
    name: "IDLE",
    deadlineAt: undefined,
    running,
    previous: undefined,
    target: undefined,
    deadlineMs: 0,
    orderId: "",
    message: "",
    changedAt: now,
    startingExits: 0,
    stopping: false,
    child: { running: false, startedAt: now, quickExits: 0, restartAt: now, killed: false },
  };
}

/** What state.json says of the machine. */
export function toStateFile(s: MachineState): Omit<UpdaterStateFile, "schema"> {
  const ref = (x: Slot | undefined) => (x ? { version: x.version, sha256: x.sha256 } : undefined);
  return {
    state: s.name,
    target: ref(s.target),
    previous: ref(s.previous),
    running: ref(s.running),
    message: s.message,
    changedAt: new Date(s.changedAt).toISOString(),
    deadlineMs: s.deadlineMs || undefined,
    orderId: s.orderId || undefined,
  };
}

/** The next state and the actions to run for `event` at time `now` (ms). */
export function step(s: MachineState, event: MachineEvent, now: number, cfg: MachineConfig = DEFAULT_MACHINE_CONFIG): Step {
  if (event.type === "childExited") return childExited(s, event, now, cfg);
  if (event.type === "switchFailed") return switchFailed(s, event.message, now);
  if (atRest(s.name)) return atRestStep(s, event, now, cfg);
  switch (s.name) {
    case "STAGED":
      return staged(s, event, now, cfg);
    case "SWITCHING":
      return switching(s, event, now, cfg);
    case "STARTING":
      return starting(s, event, now, cfg);
    default:
      return rollingBack(s, event, now, cfg);
  }
}

// A state change: the new name, its deadline, a new changedAt, and state.json written.
function enter(s: MachineState, name: UpdaterStateName, now: number, patch: Partial<MachineState>, actions: MachineAction[]): Step {
  const next: MachineState = { ...s, deadlineAt: undefined, stopping: false, ...patch, name, changedAt: now };
  return { state: next, actions: [...actions, { type: "writeState" }] };
}

function stay(s: MachineState, actions: MachineAction[] = []): Step {
  return { state: s, actions };
}

// The child is started (by the actions that follow): the machine counts it running.
function started(child: ChildView, now: number): ChildView {
  return { ...child, running: true, startedAt: now, restartAt: undefined, killed: false };
}

// The child, when it should run and its backoff is over, is started again.
function restartDue(s: MachineState, now: number): Step | undefined {
  const c = s.child;
  if (c.running || c.restartAt === undefined || now < c.restartAt || !s.running || s.stopping) return undefined;
  return stay({ ...s, child: started(c, now) }, [{ type: "startChild", slot: s.running }]);
}

function backoff(quickExits: number, cfg: MachineConfig): number {
  return Math.min(cfg.restartCapMs, cfg.restartBaseMs * 2 ** Math.min(quickExits, 20));
}

function childExited(s: MachineState, e: { code: number | null; signal: string | null }, now: number, cfg: MachineConfig): Step {
  const quick = now - s.child.startedAt < cfg.stableRunMs;
  const quickExits = quick ? s.child.quickExits + 1 : 0;
  const child: ChildView = {
    ...s.child,
    running: false,
    quickExits,
    restartAt: now + backoff(Math.max(0, quickExits - 1), cfg),
    killed: false,
  };
  const how = e.signal ? `signal ${e.signal}` : `code ${e.code}`;
  const exited: MachineState = { ...s, child };
  if (s.stopping) return afterStop(exited, now, cfg);
  if (s.name === "STARTING") {
    const startingExits = s.startingExits + 1;
    if (startingExits >= cfg.crashLoopExits) {
      return beginRollback(
        { ...exited, startingExits },
        now,
        cfg,
        `${s.target?.version} exited ${startingExits} times before reaching the controller (last: ${how})`,
      );
    }
    return stay({ ...exited, startingExits }, [{ type: "log", message: `the new agent exited (${how}); starting it again` }]);
  }
  return stay(exited, [{ type: "log", message: `the agent exited (${how}); starting it again in ${child.restartAt! - now} ms` }]);
}

// The links could not be switched (disk full, EIO, something in the way): the child was not started,
// and the version that ran before the switch is started again (its own directory, not the link).
// STARTING came from SWITCHING (that version is previous), ROLLING_BACK from the target.
function switchFailed(s: MachineState, why: string, now: number): Step {
  if (s.name !== "STARTING" && s.name !== "ROLLING_BACK") return stay(s);
  const back = s.name === "STARTING" ? s.previous : s.target;
  const what = s.name === "STARTING" ? `could not switch to ${s.target?.version}` : `could not go back to ${s.previous?.version}`;
  const child: ChildView = { ...s.child, running: false, restartAt: now, killed: false };
  const message = `${s.name === "STARTING" ? "" : `${s.message}; `}${what}: ${why}${back ? `; ${back.version} runs again` : ""}`;
  return enter(s, "FAILED", now, { running: back, child, message }, []);
}

function atRestStep(s: MachineState, e: MachineEvent, now: number, cfg: MachineConfig): Step {
  if (e.type === "tick") return restartDue(s, now) ?? stay(s);
  if (e.type === "requestInvalid") return enter(s, "FAILED", now, { message: `refused the update request: ${e.message}` }, []);
  if (e.type !== "request") return stay(s);
  const target = slotOf(e.request);
  const late = lateRequest(e.request, now);
  if (late) return enter(s, "FAILED", now, { target, deadlineMs: e.request.deadlineMs, orderId: e.request.orderId, message: late }, []);
  if (s.running && target.sha256 === s.running.sha256) {
    return stay(s, [{ type: "log", message: `${target.version} already runs: nothing to do` }]);
  }
  return stage(s, e.request, now, cfg);
}

// Why a request is dropped unseen: it waited in its file (an update under way) past its own deadline.
function lateRequest(req: UpdateRequest, now: number): string | undefined {
  const age = now - Date.parse(req.requestedAt);
  if (!(age > req.deadlineMs)) return undefined;
  return `dropped the request for ${req.version} (order ${req.orderId || "none"}): written ${age} ms ago, past its deadline of ${req.deadlineMs} ms`;
}

function stage(s: MachineState, req: UpdateRequest, now: number, cfg: MachineConfig): Step {
  const target = slotOf(req);
  return enter(
    s,
    "STAGED",
    now,
    {
      target,
      previous: s.running,
      deadlineMs: req.deadlineMs,
      orderId: req.orderId,
      message: `validating ${target.version}`,
      deadlineAt: now + cfg.validateTimeoutMs,
      startingExits: 0,
    },
    [{ type: "validate", target }],
  );
}

function staged(s: MachineState, e: MachineEvent, now: number, cfg: MachineConfig): Step {
  const target = s.target!;
  if (e.type === "request") {
    const late = lateRequest(e.request, now);
    if (late) return stay(s, [{ type: "log", message: `${late}; the update to ${target.version} goes on` }]);
    // Nothing is switched yet: the newer request replaces the staged one.
    if (s.running && e.request.sha256 === s.running.sha256) {
      return enter(
        s,
        "IDLE",
        now,
        { message: `the update to ${target.version} was replaced by a request for ${s.running.version}, which runs` },
        [],
      );
    }
    if (e.request.sha256 === target.sha256) return stay(s);
    return stage(s, e.request, now, cfg);
  }
  if (e.type === "requestInvalid") return stay(s, [{ type: "log", message: `refused an update request: ${e.message}` }]);
  if (e.type === "validated") {
    if (e.sha256 !== target.sha256) return stay(s);
    if (e.error) return enter(s, "FAILED", now, { message: `${target.version} is not a usable bundle: ${e.error}` }, []);
    return beginSwitch(s, now, cfg);
  }
  if (e.type === "tick" && now >= s.deadlineAt!) {
    return enter(s, "FAILED", now, { message: `validating ${target.version} took longer than ${cfg.validateTimeoutMs} ms` }, []);
  }
  return (e.type === "tick" && restartDue(s, now)) || stay(s);
}

function beginSwitch(s: MachineState, now: number, cfg: MachineConfig): Step {
  const msg = `switching from ${s.running?.version ?? "nothing"} to ${s.target!.version}`;
  if (!s.child.running) return switchAndStart(enter(s, "SWITCHING", now, { message: msg }, []), now, cfg);
  return enter(
    s,
    "SWITCHING",
    now,
    { message: msg, stopping: true, deadlineAt: now + cfg.stopTimeoutMs, child: { ...s.child, killed: false } },
    [{ type: "stopChild" }],
  );
}

// SWITCHING with the old child gone: point current at the target (previous at what ran), start it.
function switchAndStart(prev: Step, now: number, cfg: MachineConfig): Step {
  const s = prev.state;
  const target = s.target!;
  const links: MachineAction = { type: "switchLinks", current: target.dir, previous: s.previous?.dir };
  const next = enter(
    // A new version starts with no backoff of the old one's.
    { ...s, running: target, child: started({ ...s.child, quickExits: 0 }, now) },
    "STARTING",
    now,
    {
      message: `${target.version} started; waiting for it to reach the controller`,
      deadlineAt: now + (s.deadlineMs || cfg.defaultDeadlineMs),
      startingExits: 0,
    },
    [links, { type: "startChild", slot: target }],
  );
  return { state: next.state, actions: [...prev.actions, ...next.actions] };
}

// The child exited while the machine waited for it (SWITCHING or ROLLING_BACK's stop).
function afterStop(s: MachineState, now: number, cfg: MachineConfig): Step {
  const ready = { ...s, stopping: false };
  if (s.name === "SWITCHING") return switchAndStart({ state: ready, actions: [] }, now, cfg);
  return restorePrevious(ready, now, cfg);
}

function switching(s: MachineState, e: MachineEvent, now: number, cfg: MachineConfig): Step {
  if (e.type !== "tick" || now < s.deadlineAt!) return stay(s);
  if (!s.child.killed) {
    return stay({ ...s, deadlineAt: now + cfg.killTimeoutMs, child: { ...s.child, killed: true } }, [
      { type: "killChild" },
      { type: "log", message: `the old agent did not stop within ${cfg.stopTimeoutMs} ms: killing it` },
    ]);
  }
  // The old agent outlived SIGKILL: nothing was switched, and it is still the one that runs.
  return enter(
    s,
    "FAILED",
    now,
    { message: `the old agent did not exit even after SIGKILL: stayed on ${s.running?.version}`, running: s.running },
    [],
  );
}

function starting(s: MachineState, e: MachineEvent, now: number, cfg: MachineConfig): Step {
  const target = s.target!;
  if (e.type === "confirmed" && e.sha256 === target.sha256) {
    return enter(s, "CONFIRMED", now, { message: `${target.version} reached the controller` }, [{ type: "prune" }]);
  }
  if (e.type !== "tick") return stay(s);
  if (now >= s.deadlineAt!) {
    return beginRollback(s, now, cfg, `${target.version} did not reach the controller within ${s.deadlineMs || cfg.defaultDeadlineMs} ms`);
  }
  return restartDue(s, now) ?? stay(s);
}

// Going back to the previous version: stop the new agent if it runs, then restorePrevious.
function beginRollback(s: MachineState, now: number, cfg: MachineConfig, why: string): Step {
  if (!s.previous) return enter(s, "FAILED", now, { message: `${why}; there is no previous version to go back to` }, []);
  if (!s.child.running) return restorePrevious(enter(s, "ROLLING_BACK", now, { message: why }, []).state, now, cfg);
  return enter(
    s,
    "ROLLING_BACK",
    now,
    { message: why, stopping: true, deadlineAt: now + cfg.stopTimeoutMs, child: { ...s.child, killed: false } },
    [{ type: "stopChild" }],
  );
}

// ROLLING_BACK with the new agent gone: current back to previous, started, waiting for its confirmation.
function restorePrevious(s: MachineState, now: number, cfg: MachineConfig): Step {
  const previous = s.previous!;
  return {
    state: {
      ...s,
      running: previous,
      stopping: false,
      deadlineAt: now + cfg.rollbackConfirmMs,
      child: started({ ...s.child, quickExits: 0 }, now),
    },
    actions: [{ type: "switchLinks", current: previous.dir }, { type: "startChild", slot: previous }, { type: "writeState" }],
  };
}

function rollingBack(s: MachineState, e: MachineEvent, now: number, cfg: MachineConfig): Step {
  const previous = s.previous!;
  if (!s.stopping && e.type === "confirmed" && e.sha256 === previous.sha256) {
    return enter(s, "ROLLED_BACK", now, { message: `back on ${previous.version}: ${s.message}` }, [{ type: "prune" }]);
  }
  if (e.type !== "tick") return stay(s);
  if (s.stopping && now >= s.deadlineAt!) {
    if (!s.child.killed) {
      return stay({ ...s, deadlineAt: now + cfg.killTimeoutMs, child: { ...s.child, killed: true } }, [
        { type: "killChild" },
        { type: "log", message: `the new agent did not stop within ${cfg.stopTimeoutMs} ms: killing it` },
      ]);
    }
    return enter(s, "FAILED", now, { message: `${s.message}; the new agent did not exit even after SIGKILL, so it still runs` }, []);
  }
  if (!s.stopping && now >= s.deadlineAt!) {
    return enter(
      s,
      "FAILED",
      now,
      {
        message: `${s.message}; ${previous.version} did not reach the controller within ${cfg.rollbackConfirmMs} ms of going back, and keeps running`,
      },
      [],
    );
  }
  return restartDue(s, now) ?? stay(s);
}

/**
 * The machine after the updater (re)starts, from the state.json it left and the version `current`
 * points at; its child is not running. At rest: as it was. STAGED: validated again. SWITCHING or
 * STARTING: the target is started (again) with a fresh deadline. ROLLING_BACK: the previous
 * version is started with a fresh deadline.
 */
export function recoverState(
  file: UpdaterStateFile | undefined,
  current: Slot | undefined,
  now: number,
  cfg: MachineConfig = DEFAULT_MACHINE_CONFIG,
): Step {
  const base = initialState(current, now);
  if (!file) return { state: base, actions: [{ type: "writeState" }] };
  const s: MachineState = {
    ...base,
    name: file.state,
    target: file.target && slotOf(file.target),
    previous: file.previous && slotOf(file.previous),
    deadlineMs: file.deadlineMs ?? 0,
    orderId: file.orderId ?? "",
    message: file.message,
    changedAt: Date.parse(file.changedAt) || now,
  };
  if (atRest(s.name) || !s.target) return { state: { ...s, name: atRest(s.name) ? s.name : "IDLE" }, actions: [] };
  switch (s.name) {
    case "STAGED":
      return enter(
        s,
        "STAGED",
        now,
        { deadlineAt: now + cfg.validateTimeoutMs, message: `validating ${s.target.version} again after a restart` },
        [{ type: "validate", target: s.target }],
      );
    case "SWITCHING":
    case "STARTING":
      return switchAndStart(
        enter(s, "SWITCHING", now, { message: `switching to ${s.target.version} again after a restart` }, []),
        now,
        cfg,
      );
    default:
      if (!s.previous) return enter(s, "FAILED", now, { message: `${s.message}; there is no previous version to go back to` }, []);
      return restorePrevious(enter(s, "ROLLING_BACK", now, { message: s.message }, []).state, now, cfg);
  }
}
