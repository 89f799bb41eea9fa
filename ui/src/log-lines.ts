// What the logs view shows of a read_logs answer, apart from the page: one node's containers'
// lines merged by time, the lines a follow has not shown yet, and the "since" field read as a
// duration. Pure (no DOM, no API), so test/ui-log-lines.test.ts checks it as it is.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { ContainerLogs } from "../../gen/skipper/v1/work_order_pb.js";

/** One line as shown: when (the engine's time, to the millisecond the agent keeps), where, what. */
export interface ShownLine {
  at: Date | undefined;
  service: string;
  container: string;
  stream: string;
  text: string;
}

/** Where a follow has got to on a node: the newest time shown and the lines shown at that time. */
export interface LogCursor {
  at: Date;
  /** Keys (lineKey) of the lines at exactly `at`: the engine's --since is inclusive, so they come again. */
  shownAt: Set<string>;
}

/** A node's containers' lines as one list, oldest first (stable: a container's order is kept). */
export function mergeContainerLogs(logs: ContainerLogs[]): ShownLine[] {
  const lines = logs.flatMap((c) =>
    c.lines.map((l) => ({
      at: l.time ? timestampDate(l.time) : undefined,
      service: c.service,
      container: c.container,
      stream: l.stream,
      text: l.text,
    })),
  );
  return lines.sort((a, b) => timeOf(a) - timeOf(b));
}

/** The lines not shown before `cursor` (all of them without one), and the cursor after them. */
export function linesAfter(lines: ShownLine[], cursor: LogCursor | undefined): { fresh: ShownLine[]; cursor: LogCursor | undefined } {
  const fresh = cursor
    ? lines.filter((l) => timeOf(l) > cursor.at.getTime() || (timeOf(l) === cursor.at.getTime() && !cursor.shownAt.has(lineKey(l))))
    : lines;
  let next = cursor && { at: cursor.at, shownAt: new Set(cursor.shownAt) };
  for (const l of fresh) {
    if (!l.at) continue;
    if (!next || l.at.getTime() > next.at.getTime()) next = { at: l.at, shownAt: new Set() };
    if (l.at.getTime() === next.at.getTime()) next.shownAt.add(lineKey(l));
  }
  return { fresh, cursor: next };
}

/** "since" as the CLI's --since reads it ("30s", "10m", "2h", "7d"; common/duration.ts), in ms; a unit is required here. */
export function parseSince(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) throw new Error(`"since" must be a duration like 30s, 10m or 2h, got "${text}"`);
  return Math.round(Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2]!]!);
}

function timeOf(l: ShownLine): number {
  return l.at ? l.at.getTime() : 0;
}

function lineKey(l: ShownLine): string {
  return JSON.stringify([l.container, l.stream, l.text]);
}
