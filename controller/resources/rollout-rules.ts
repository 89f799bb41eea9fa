// Rules for a tenant's rollout policy (TenantSpec.rollout), checked when the tenant is written:
// shares in range, wave names usable in events and URLs, a bake shorter than the deadline that
// includes it. Shape only: which nodes a wave takes is decided when a rollout starts.
import { durationMs } from "@bufbuild/protobuf/wkt";
import type { FreezeSpec, MaintenanceWindow, RolloutPolicy } from "../../gen/skipper/v1/rollout_pb.js";
import { DAYS, isTimeZone, minutesOf } from "./maintenance-window.js";
import { checkId } from "../base/id-checks.js";
import { invalid } from "../base/errors.js";
import { checkSelector } from "../domain/label-selector.js";

const WAVE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
const MAX_WAVES = 32;
const MAX_DURATION_MS = 7 * 24 * 3600 * 1000;

/** Checks a rollout policy; `field` is where it sits in the request. */
export function checkRolloutPolicy(p: RolloutPolicy | undefined, field: string): void {
  if (!p) return;
  if (p.waves.length > MAX_WAVES) fail(`${field}.waves`, `may hold at most ${MAX_WAVES} waves`);
  const names = new Set<string>();
  p.waves.forEach((w, i) => {
    const at = `${field}.waves[${i}]`;
    if (w.name !== "") {
      if (!WAVE_NAME.test(w.name)) fail(`${at}.name`, "must be 1-63 characters of [A-Za-z0-9._-], starting with a letter or digit");
      if (names.has(w.name)) fail(`${at}.name`, `repeats the name of an earlier wave ("${w.name}")`);
      names.add(w.name);
    }
    checkSelector(w.nodeSelector, `${at}.node_selector`);
    if (w.size.case === "count" && w.size.value < 1) fail(`${at}.count`, "must be at least 1 (leave size unset for every node)");
    if (w.size.case === "percent" && (w.size.value < 1 || w.size.value > 100)) fail(`${at}.percent`, "must be 1 to 100");
  });
  const bake = duration(p.minHealthyTime, `${field}.min_healthy_time`);
  const deadline = duration(p.progressDeadline, `${field}.progress_deadline`);
  if (deadline > 0 && bake >= deadline) {
    fail(`${field}.progress_deadline`, "must be longer than min_healthy_time, which it includes");
  }
  const budget = p.failureBudget?.limit;
  if (budget?.case === "percent" && budget.value > 100) fail(`${field}.failure_budget.percent`, "must be 0 to 100");
}

const MAX_WINDOWS = 16;
const MAX_REASON = 1024;
const MAX_FREEZE_MS = 366 * 24 * 3600 * 1000;

/** Checks a tenant's maintenance windows. */
export function checkWindows(ws: readonly MaintenanceWindow[], field: string): void {
  if (ws.length > MAX_WINDOWS) fail(field, `may hold at most ${MAX_WINDOWS} windows`);
  ws.forEach((w, i) => {
    const at = `${field}[${i}]`;
    w.days.forEach((d, j) => {
      if (!(DAYS as readonly string[]).includes(d)) fail(`${at}.days[${j}]`, `must be one of ${DAYS.join(", ")}`);
    });
    if (minutesOf(w.start) === undefined) fail(`${at}.start`, 'must be "HH:MM" (24 h)');
    if (minutesOf(w.end) === undefined) fail(`${at}.end`, 'must be "HH:MM" (24 h)');
    if (!isTimeZone(w.timeZone)) fail(`${at}.time_zone`, `is not a time zone (e.g. "Europe/Berlin")`);
  });
}

/** Checks a freeze: a reason of sane length, an end, a scope that is well-formed. */
export function checkFreeze(f: FreezeSpec, field: string): void {
  if (f.reason.length > MAX_REASON) fail(`${field}.reason`, `must be at most ${MAX_REASON} characters`);
  if (!f.endsAt) fail(`${field}.ends_at`, "is required: a freeze ends by itself");
  const ms = Number(f.endsAt.seconds) * 1000;
  if (!Number.isFinite(ms) || ms - Date.now() > MAX_FREEZE_MS) fail(`${field}.ends_at`, "must be within a year");
  if (f.tenantId !== "") checkId(f.tenantId, `${field}.tenant_id`);
  checkSelector(f.nodeSelector, `${field}.node_selector`);
}

function duration(d: Parameters<typeof durationMs>[0] | undefined, field: string): number {
  if (!d) return 0;
  const ms = durationMs(d);
  if (ms <= 0 || ms > MAX_DURATION_MS) fail(field, "must be positive and at most 7 days");
  return ms;
}

function fail(field: string, problem: string): never {
  throw invalid(`${field} ${problem}`, { field });
}
