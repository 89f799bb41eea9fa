// Maintenance windows: whether one of a tenant's weekly windows is open at an instant, and when
// the next one opens. Pure; time zones through Intl (the IANA database Node ships with).
import type { MaintenanceWindow } from "../../gen/skipper/v1/rollout_pb.js";

export const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] as const;
const HHMM = /^([01][0-9]|2[0-3]):([0-5][0-9])$/;
const DAY_MS = 86_400_000;

/** Minutes after midnight of "HH:MM", or undefined when it is not one. */
export function minutesOf(hhmm: string): number | undefined {
  const m = HHMM.exec(hhmm);
  return m ? Number(m[1]) * 60 + Number(m[2]) : undefined;
}

/** True when `tz` is a time zone Intl knows ("" is UTC). */
export function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: tz || "UTC" });
    return true;
  } catch {
    return false;
  }
}

interface Local {
  /** Day of the week, 0 = Sunday. */
  day: number;
  minutes: number;
  y: number;
  m: number;
  d: number;
}

const formats = new Map<string, Intl.DateTimeFormat>();

function localOf(t: number, tz: string): Local {
  let f = formats.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: tz || "UTC",
      hourCycle: "h23",
      weekday: "short",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
    });
    formats.set(tz, f);
  }
  const parts = Object.fromEntries(f.formatToParts(t).map((p) => [p.type, p.value]));
  const day = DAYS.indexOf(parts.weekday!.toLowerCase().slice(0, 3) as (typeof DAYS)[number]);
  return {
    day,
    minutes: Number(parts.hour) * 60 + Number(parts.minute),
    y: Number(parts.year),
    m: Number(parts.month),
    d: Number(parts.day),
  };
}

/**
 * The instant a wall-clock time in `tz` falls on: the earlier of two when the clocks go back, and
 * (when the clocks skip it) the instant the offset before the change gives.
 */
function instantOf(y: number, m: number, d: number, minutes: number, tz: string): number {
  const wall = Date.UTC(y, m - 1, d) + minutes * 60_000;
  const offsetAt = (t: number) => {
    const l = localOf(t, tz);
    return Date.UTC(l.y, l.m - 1, l.d) + l.minutes * 60_000 - Math.floor(t / 60_000) * 60_000;
  };
  const isWall = (t: number) => {
    const l = localOf(t, tz);
    return l.y === y && l.m === m && l.d === d && l.minutes === minutes;
  };
  // The offsets a day before and after cover both sides of any change on this day.
  const candidates = [wall - offsetAt(wall - DAY_MS), wall - offsetAt(wall + DAY_MS)].filter(isWall).sort((a, b) => a - b);
  return candidates[0] ?? wall - offsetAt(wall - DAY_MS);
}

function opensOn(w: MaintenanceWindow, day: number): boolean {
  return w.days.length === 0 || w.days.includes(DAYS[day]!);
}

/** True when window `w` is open at `t` (ms). */
export function isOpen(w: MaintenanceWindow, t: number): boolean {
  const start = minutesOf(w.start) ?? 0;
  const end = minutesOf(w.end) ?? 0;
  const l = localOf(t, w.timeZone);
  if (start === end) return opensOn(w, l.day);
  if (start < end) return opensOn(w, l.day) && l.minutes >= start && l.minutes < end;
  // Crosses midnight: opened today, or opened yesterday and not closed yet.
  return (opensOn(w, l.day) && l.minutes >= start) || (opensOn(w, (l.day + 6) % 7) && l.minutes < end);
}

/** When the next of `windows` opens after `t` (ms), looking a week and a day ahead. */
export function nextOpening(windows: readonly MaintenanceWindow[], t: number): number | undefined {
  let best: number | undefined;
  for (const w of windows) {
    const start = minutesOf(w.start) ?? 0;
    for (let k = 0; k <= 8; k++) {
      const l = localOf(t + k * DAY_MS, w.timeZone);
      if (!opensOn(w, l.day)) continue;
      const at = instantOf(l.y, l.m, l.d, start, w.timeZone);
      if (at > t && (best === undefined || at < best)) best = at;
    }
  }
  return best;
}

/** Whether rollouts may start nodes at `t`: always without windows; else inside one of them. */
export function windowOpen(windows: readonly MaintenanceWindow[], t: number): boolean {
  return windows.length === 0 || windows.some((w) => isOpen(w, t));
}
