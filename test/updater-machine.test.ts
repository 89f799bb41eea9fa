// skippy-updater's state machine (agent/updater/updater-machine.ts), pure: every state's deadline,
// superseding requests, rollback on a deadline and on a crash loop, and the no-op request.
import { describe, expect, it } from "vitest";
import {
  DEFAULT_MACHINE_CONFIG as CFG,
  type MachineAction,
  type MachineEvent,
  type MachineState,
  initialState,
  recoverState,
  slotOf,
  step,
  toStateFile,
} from "../agent/updater/updater-machine.js";
import {
  REQUEST_SCHEMA,
  STATE_SCHEMA,
  type UpdateRequest,
  type UpdaterStateFile,
  type UpdaterStateName,
  versionDirName,
} from "../agent/updater/update-files.js";

const sha = (c: string) => c.repeat(64);
const A = slotOf({ version: "0.1.0-a", sha256: sha("a") });
const B = slotOf({ version: "0.1.0-b", sha256: sha("b") });
const C = slotOf({ version: "0.1.0-c", sha256: sha("c") });

// The machine's clock in the running test: a request is written "now" unless said otherwise.
let clock = 0;

function request(slot: { version: string; sha256: string }, deadlineMs = 30_000, requestedAt = clock): UpdateRequest {
  return {
    schema: REQUEST_SCHEMA,
    version: slot.version,
    sha256: slot.sha256,
    dir: versionDirName(slot.version, slot.sha256),
    deadlineMs,
    orderId: "o-1",
    requestedAt: new Date(requestedAt).toISOString(),
  };
}

// Drives the machine: keeps the state and the clock, and the actions of the last step.
class Run {
  state: MachineState;
  actions: MachineAction[] = [];

  get now(): number {
    return clock;
  }
  set now(t: number) {
    clock = t;
  }

  constructor() {
    this.now = 1_000_000;
    // Started at rest on A, its child running.
    const first = step(initialState(A, this.now), { type: "tick" }, this.now);
    this.state = first.state;
    this.actions = first.actions;
  }

  on(e: MachineEvent): MachineAction[] {
    const r = step(this.state, e, this.now, CFG);
    this.state = r.state;
    this.actions = r.actions;
    return r.actions;
  }

  tick(ms: number): MachineAction[] {
    this.now += ms;
    return this.on({ type: "tick" });
  }

  types(): string[] {
    return this.actions.map((a) => a.type);
  }

  // A → STARTING on B (old child stopped on SIGTERM).
  toStarting(slot = B, deadlineMs = 30_000): void {
    this.on({ type: "request", request: request(slot, deadlineMs) });
    this.on({ type: "validated", sha256: slot.sha256 });
    this.on({ type: "childExited", code: 0, signal: null });
    expect(this.state.name).toBe("STARTING");
  }
}

describe("updater machine", () => {
  it("starts the child of what runs at rest", () => {
    const r = new Run();
    expect(r.actions).toEqual([{ type: "startChild", slot: A }]);
    expect(r.state.name).toBe("IDLE");
    expect(r.state.deadlineAt).toBeUndefined();
  });

  it("goes IDLE -> STAGED -> SWITCHING -> STARTING -> CONFIRMED with the right actions", () => {
    const r = new Run();
    expect(r.on({ type: "request", request: request(B) })).toEqual([{ type: "validate", target: B }, { type: "writeState" }]);
    expect(r.state).toMatchObject({ name: "STAGED", target: B, previous: A, running: A, deadlineAt: r.now + CFG.validateTimeoutMs });
    expect(r.on({ type: "validated", sha256: B.sha256 })).toEqual([{ type: "stopChild" }, { type: "writeState" }]);
    expect(r.state).toMatchObject({ name: "SWITCHING", stopping: true, deadlineAt: r.now + CFG.stopTimeoutMs });
    r.now += 2_000;
    expect(r.on({ type: "childExited", code: 0, signal: null })).toEqual([
      { type: "switchLinks", current: B.dir, previous: A.dir },
      { type: "startChild", slot: B },
      { type: "writeState" },
    ]);
    expect(r.state).toMatchObject({ name: "STARTING", running: B, previous: A, deadlineAt: r.now + 30_000 });
    // A confirmation of another bundle is not this one's.
    r.on({ type: "confirmed", sha256: A.sha256 });
    expect(r.state.name).toBe("STARTING");
    r.on({ type: "confirmed", sha256: B.sha256 });
    expect(r.state).toMatchObject({ name: "CONFIRMED", running: B, previous: A, target: B, deadlineAt: undefined });
    expect(r.types()).toEqual(["prune", "writeState"]);
    expect(toStateFile(r.state)).toMatchObject({ state: "CONFIRMED", running: { version: "0.1.0-b" }, previous: { version: "0.1.0-a" } });
  });

  it("a request for what already runs is a no-op (taken, nothing switched)", () => {
    const r = new Run();
    const before = r.state;
    expect(r.on({ type: "request", request: request(A) })).toEqual([expect.objectContaining({ type: "log" })]);
    expect(r.state).toBe(before);
  });

  describe("every state but the rest states times out", () => {
    it("STAGED: validation that never answers fails, and the next request proceeds", () => {
      const r = new Run();
      r.on({ type: "request", request: request(B) });
      r.tick(CFG.validateTimeoutMs - 1);
      expect(r.state.name).toBe("STAGED");
      r.tick(1);
      expect(r.state.name).toBe("FAILED");
      expect(r.state.message).toMatch(/validating 0\.1\.0-b took longer/);
      expect(r.state.running).toEqual(A);
      // Not blocked: the next request is taken at once.
      r.on({ type: "request", request: request(C) });
      expect(r.state).toMatchObject({ name: "STAGED", target: C, previous: A });
      // The late answer for B changes nothing.
      r.on({ type: "validated", sha256: B.sha256 });
      expect(r.state).toMatchObject({ name: "STAGED", target: C });
    });

    it("SWITCHING: the old agent that ignores SIGTERM is killed, and one that outlives SIGKILL fails the update", () => {
      const r = new Run();
      r.on({ type: "request", request: request(B) });
      r.on({ type: "validated", sha256: B.sha256 });
      r.tick(CFG.stopTimeoutMs);
      expect(r.types()).toEqual(["killChild", "log"]);
      expect(r.state.name).toBe("SWITCHING");
      r.tick(CFG.killTimeoutMs);
      expect(r.state).toMatchObject({ name: "FAILED", running: A });
      expect(r.state.message).toMatch(/SIGKILL/);
    });

    it("SWITCHING: a kill that works switches", () => {
      const r = new Run();
      r.on({ type: "request", request: request(B) });
      r.on({ type: "validated", sha256: B.sha256 });
      r.tick(CFG.stopTimeoutMs);
      r.on({ type: "childExited", code: null, signal: "SIGKILL" });
      expect(r.state).toMatchObject({ name: "STARTING", running: B });
    });

    it("STARTING: no confirmation within the request's deadline rolls back to the previous version", () => {
      const r = new Run();
      r.toStarting(B, 15_000);
      r.tick(14_999);
      expect(r.state.name).toBe("STARTING");
      expect(r.tick(1)).toEqual([{ type: "stopChild" }, { type: "writeState" }]);
      expect(r.state).toMatchObject({ name: "ROLLING_BACK", stopping: true });
      expect(r.state.message).toMatch(/0\.1\.0-b did not reach the controller within 15000 ms/);
      expect(r.on({ type: "childExited", code: 0, signal: null })).toEqual([
        { type: "switchLinks", current: A.dir },
        { type: "startChild", slot: A },
        { type: "writeState" },
      ]);
      expect(r.state).toMatchObject({ name: "ROLLING_BACK", running: A, stopping: false, deadlineAt: r.now + CFG.rollbackConfirmMs });
      r.on({ type: "confirmed", sha256: A.sha256 });
      expect(r.state).toMatchObject({ name: "ROLLED_BACK", running: A, target: B, previous: A });
      expect(r.types()).toEqual(["prune", "writeState"]);
      expect(r.state.message).toMatch(/^back on 0\.1\.0-a: 0\.1\.0-b did not reach/);
    });

    it("ROLLING_BACK: a new agent that will not stop is killed, then the update fails", () => {
      const r = new Run();
      r.toStarting();
      r.tick(30_000);
      r.tick(CFG.stopTimeoutMs);
      expect(r.types()).toEqual(["killChild", "log"]);
      r.tick(CFG.killTimeoutMs);
      expect(r.state.name).toBe("FAILED");
      expect(r.state.message).toMatch(/SIGKILL/);
    });

    it("ROLLING_BACK: a previous version that does not confirm either ends FAILED, still running it", () => {
      const r = new Run();
      r.toStarting();
      r.tick(30_000);
      r.on({ type: "childExited", code: 0, signal: null });
      r.tick(CFG.rollbackConfirmMs - 1);
      expect(r.state.name).toBe("ROLLING_BACK");
      r.tick(1);
      expect(r.state).toMatchObject({ name: "FAILED", running: A, deadlineAt: undefined });
      expect(r.state.message).toMatch(/0\.1\.0-a did not reach the controller within .* and keeps running/);
      // FAILED is at rest: the child is still supervised, and the next request is taken.
      r.on({ type: "childExited", code: 1, signal: null });
      expect(r.tick(CFG.restartBaseMs)).toEqual([{ type: "startChild", slot: A }]);
      r.on({ type: "request", request: request(C) });
      expect(r.state).toMatchObject({ name: "STAGED", target: C, previous: A });
    });
  });

  it("rolls back early when the new agent keeps exiting in STARTING", () => {
    const r = new Run();
    r.toStarting(B, 600_000);
    r.on({ type: "childExited", code: 3, signal: null });
    expect(r.state.name).toBe("STARTING");
    expect(r.tick(CFG.restartBaseMs)).toEqual([{ type: "startChild", slot: B }]);
    r.on({ type: "childExited", code: 3, signal: null });
    r.tick(CFG.restartBaseMs * 2);
    expect(r.state.name).toBe("STARTING");
    expect(r.on({ type: "childExited", code: 3, signal: null })).toEqual([
      { type: "switchLinks", current: A.dir },
      { type: "startChild", slot: A },
      { type: "writeState" },
    ]);
    expect(r.state).toMatchObject({ name: "ROLLING_BACK", running: A });
    expect(r.state.message).toMatch(/exited 3 times before reaching the controller \(last: code 3\)/);
    r.on({ type: "confirmed", sha256: A.sha256 });
    expect(r.state.name).toBe("ROLLED_BACK");
  });

  it("a newer request replaces a staged one at once; one during an update waits in its file", () => {
    const r = new Run();
    r.on({ type: "request", request: request(B) });
    r.on({ type: "request", request: request(C) });
    expect(r.types()).toEqual(["validate", "writeState"]);
    expect(r.state).toMatchObject({ name: "STAGED", target: C, previous: A });
    // A request back to what runs cancels the staged update.
    r.on({ type: "request", request: request(A) });
    expect(r.state).toMatchObject({ name: "IDLE", running: A });
    // During STARTING the request is left alone (not taken) until the machine is at rest.
    r.toStarting(B);
    expect(r.on({ type: "request", request: request(C) })).toEqual([]);
    r.on({ type: "confirmed", sha256: B.sha256 });
    r.on({ type: "request", request: request(C) });
    expect(r.state).toMatchObject({ name: "STAGED", target: C, previous: B });
  });

  it("an invalid bundle or request fails without switching", () => {
    const r = new Run();
    r.on({ type: "request", request: request(B) });
    r.on({ type: "validated", sha256: B.sha256, error: "sha256 mismatch" });
    expect(r.state).toMatchObject({ name: "FAILED", running: A });
    expect(r.state.message).toBe("0.1.0-b is not a usable bundle: sha256 mismatch");
    r.on({ type: "requestInvalid", message: "request: dir is wrong" });
    expect(r.types()).toEqual(["writeState"]);
    expect(r.state.message).toMatch(/refused the update request/);
  });

  it("restarts a child that exits at rest, with a growing backoff that resets after a stable run", () => {
    const r = new Run();
    r.on({ type: "childExited", code: 1, signal: null });
    expect(r.tick(CFG.restartBaseMs - 1)).toEqual([]);
    expect(r.tick(1)).toEqual([{ type: "startChild", slot: A }]);
    r.on({ type: "childExited", code: 1, signal: null });
    expect(r.tick(CFG.restartBaseMs)).toEqual([]);
    expect(r.tick(CFG.restartBaseMs)).toEqual([{ type: "startChild", slot: A }]);
    r.tick(CFG.stableRunMs);
    r.on({ type: "childExited", code: null, signal: "SIGKILL" });
    expect(r.tick(CFG.restartBaseMs)).toEqual([{ type: "startChild", slot: A }]);
  });

  it("recovers after the updater restarts in each state", () => {
    const now = 5_000;
    const file = (state: string): UpdaterStateFile => ({
      schema: STATE_SCHEMA,
      state: state as UpdaterStateName,
      target: { version: B.version, sha256: B.sha256 },
      previous: { version: A.version, sha256: A.sha256 },
      running: { version: B.version, sha256: B.sha256 },
      message: "m",
      changedAt: new Date(0).toISOString(),
      deadlineMs: 20_000,
    });
    expect(recoverState(undefined, A, now).state).toMatchObject({ name: "IDLE", running: A });
    expect(recoverState(file("CONFIRMED"), B, now).state).toMatchObject({ name: "CONFIRMED", running: B, previous: A });
    const staged = recoverState(file("STAGED"), A, now);
    expect(staged.state).toMatchObject({ name: "STAGED", deadlineAt: now + CFG.validateTimeoutMs });
    expect(staged.actions[0]).toEqual({ type: "validate", target: B });
    const starting = recoverState(file("STARTING"), B, now);
    expect(starting.state).toMatchObject({ name: "STARTING", running: B, deadlineAt: now + 20_000 });
    expect(starting.actions.map((a) => a.type)).toEqual(["writeState", "switchLinks", "startChild", "writeState"]);
    const back = recoverState(file("ROLLING_BACK"), B, now);
    expect(back.state).toMatchObject({ name: "ROLLING_BACK", running: A, deadlineAt: now + CFG.rollbackConfirmMs });
    expect(back.actions).toContainEqual({ type: "startChild", slot: A });
  });

  it("a link switch that fails ends in FAILED, starting again the version that ran before (never the target)", () => {
    const r = new Run();
    r.on({ type: "request", request: request(B) });
    r.on({ type: "validated", sha256: B.sha256 });
    expect(r.on({ type: "childExited", code: 0, signal: null }).map((a) => a.type)).toEqual(["switchLinks", "startChild", "writeState"]);
    expect(r.on({ type: "switchFailed", message: "ENOSPC: no space left on device" })).toEqual([{ type: "writeState" }]);
    expect(r.state).toMatchObject({ name: "FAILED", running: A, target: B, deadlineAt: undefined });
    expect(r.state.child.running).toBe(false);
    expect(r.state.message).toBe("could not switch to 0.1.0-b: ENOSPC: no space left on device; 0.1.0-a runs again");
    expect(r.tick(0)).toEqual([{ type: "startChild", slot: A }]);
    // A confirmation (of anything) does not turn it into CONFIRMED.
    r.on({ type: "confirmed", sha256: B.sha256 });
    expect(r.state.name).toBe("FAILED");
    // The next request is taken as usual.
    r.on({ type: "request", request: request(C) });
    expect(r.state).toMatchObject({ name: "STAGED", target: C, previous: A });
  });

  it("a link switch back that fails in ROLLING_BACK ends in FAILED on what current still names", () => {
    const r = new Run();
    r.toStarting();
    r.tick(30_000);
    expect(r.on({ type: "childExited", code: 0, signal: null }).map((a) => a.type)).toEqual(["switchLinks", "startChild", "writeState"]);
    r.on({ type: "switchFailed", message: "EIO" });
    expect(r.state).toMatchObject({ name: "FAILED", running: B });
    expect(r.state.message).toMatch(
      /did not reach the controller within 30000 ms; could not go back to 0\.1\.0-a: EIO; 0\.1\.0-b runs again$/,
    );
    expect(r.tick(0)).toEqual([{ type: "startChild", slot: B }]);
    // Out of a switch, the event changes nothing.
    const before = r.state;
    expect(r.on({ type: "switchFailed", message: "x" })).toEqual([]);
    expect(r.state).toBe(before);
  });

  it("drops a request older than its own deadline, saying so in state.json; one within it proceeds", () => {
    const r = new Run();
    expect(r.on({ type: "request", request: request(B, 30_000, r.now - 30_001) })).toEqual([{ type: "writeState" }]);
    expect(r.state).toMatchObject({ name: "FAILED", running: A, target: B, orderId: "o-1" });
    expect(r.state.message).toBe("dropped the request for 0.1.0-b (order o-1): written 30001 ms ago, past its deadline of 30000 ms");
    expect(toStateFile(r.state)).toMatchObject({ state: "FAILED", target: { version: "0.1.0-b" } });
    r.on({ type: "request", request: request(B, 30_000, r.now - 30_000) });
    expect(r.state).toMatchObject({ name: "STAGED", target: B });
    // In STAGED a late request leaves the staged update alone, as does an invalid one.
    expect(r.on({ type: "request", request: request(C, 5_000, r.now - 6_000) })).toEqual([expect.objectContaining({ type: "log" })]);
    r.on({ type: "requestInvalid", message: "request: schema is not skippy-update-request/v1" });
    expect(r.state).toMatchObject({ name: "STAGED", target: B });
  });

  it("gives the agent 80 s to finish its order on SIGTERM before SIGKILL (the unit's stop allows 90 s)", () => {
    expect(CFG.stopTimeoutMs).toBe(80_000);
    const r = new Run();
    r.on({ type: "request", request: request(B) });
    r.on({ type: "validated", sha256: B.sha256 });
    expect(r.tick(79_999)).toEqual([]);
    expect(r.tick(1).map((a) => a.type)).toEqual(["killChild", "log"]);
  });
});
