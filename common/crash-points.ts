// Named crash points for durability tests. A test starts the controller or the agent with
// SKIPPER_CRASH_AT=<point>[:<n>] and the process SIGKILLs itself the n-th time (default: the
// first) it passes that point, so a crash lands between two named writes instead of at a moment
// picked by time. Without the variable crashPoint() is one comparison: the variable is read once,
// when this module loads. The points and what each test checks are listed in ARCHITECTURE.md.
import { writeSync } from "node:fs";

/** Every crash point, in the order a write or an order passes them. */
export const CRASH_POINTS = [
  // store (controller/store/file/atomic-write.ts)
  "store.after-log-append", // the write's operation appended to the write-ahead log and synced, its record file not yet written
  "store.after-write", // temp file written (fsynced when written directly), not yet renamed over the record
  "store.after-rename", // renamed over the record, not yet acknowledged (directly written: its directory not yet fsynced)
  // store open (controller/store/file/layout-migration.ts)
  "store.after-layout-move", // a layout-1 resource directory or file renamed to its layout-2 place, not yet fsynced
  // order path (controller)
  "reconcile.after-deployment", // a deploy's deployment record stored, its work order not yet
  "dispatch.after-finish", // an order's finish stored, its events not yet
  "dispatch.before-target-record", // a result's events and deployment phase stored, the tenant's target record not yet
  // promotion (controller/promotion/environment-pass.ts)
  "promotion.after-verification-order", // a release's verification orders queued, the environment's status naming them not yet written
  "promotion.after-promote", // an environment's status with a promotion (or a return) written, its tenants not yet woken
  // agent session (controller side: controller/dispatch/agent-session.ts, session-requests.ts)
  "session.after-push-claim", // an order claimed for a session, not yet sent on it
  "session.after-ack", // a pushed order's ack taken (the claim is the agent's), not yet answered
  "session.after-result", // a result received on a session recorded, not yet answered
  // agent
  "agent.after-claim", // the controller granted the claim, the journal does not say so yet
  "agent.after-execute", // the executor returned, its result not yet journaled
  "agent.before-report", // the result journaled, not yet reported
  // container executor (agent/executors/deploy-container.ts)
  "agent.container-after-stop", // the old container stopped and renamed <name>-previous, the new one not yet created
  // agent on a session (agent/session/)
  "agent.after-push", // a pushed order journaled, its ack not yet sent
  "agent.after-ack", // the ack answered accepted, the order not yet run
] as const;

export type CrashPointName = (typeof CRASH_POINTS)[number];

/** The environment variable that arms one crash point. */
export const CRASH_ENV = "SKIPPER_CRASH_AT";

interface Armed {
  point: CrashPointName;
  /** Passes left before the kill (the kill is at the pass that makes it 0). */
  left: number;
}

/** Parses SKIPPER_CRASH_AT ("point" or "point:n"); throws on an unknown point or a bad count. */
export function parseCrashAt(value: string | undefined): Armed | undefined {
  if (value === undefined || value === "") return undefined;
  const m = /^([a-z.-]+)(?::(\d{1,9}))?$/.exec(value);
  const point = CRASH_POINTS.find((p) => p === m?.[1]);
  const n = m?.[2] === undefined ? 1 : Number(m[2]);
  if (!point || n < 1) throw new Error(`${CRASH_ENV}=${value}: expected <point>[:<n>] with n >= 1, points: ${CRASH_POINTS.join(", ")}`);
  return { point, left: n };
}

const armed = parseCrashAt(process.env[CRASH_ENV]);

/** Kills this process with SIGKILL when `point` is the armed one and this is its n-th pass. */
export function crashPoint(point: CrashPointName): void {
  if (armed === undefined || armed.point !== point || --armed.left > 0) return;
  // Synchronously, so the line is out before the kill: tests and people see where it died.
  writeSync(2, `${JSON.stringify({ action: "crash_point", point })}\n`);
  process.kill(process.pid, "SIGKILL");
}
