// The dashboard's logs view, the part apart from the page (ui/src/log-lines.ts): a node's
// containers merged by time, what a follow has not shown yet, and "since" read as the CLI does.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { ContainerLogsSchema, type ContainerLogs } from "../gen/skipper/v1/work_order_pb.js";
import { linesAfter, mergeContainerLogs, parseSince } from "../ui/src/log-lines.js";

const at = (ms: number) => new Date(Date.UTC(2025, 0, 1) + ms);
const container = (name: string, lines: [number, string, string?][]): ContainerLogs =>
  create(ContainerLogsSchema, {
    service: name.split("-")[0]!,
    container: name,
    lines: lines.map(([ms, text, stream]) => ({ time: timestampFromDate(at(ms)), text, stream: stream ?? "stdout" })),
  });

describe("the logs view's lines", () => {
  it("merges a node's containers into one list by time, a container's own order kept", () => {
    const merged = mergeContainerLogs([
      container("web-1", [
        [10, "w1"],
        [30, "w2"],
        [30, "w3"],
      ]),
      container("db-1", [
        [20, "d1", "stderr"],
        [40, "d2"],
      ]),
    ]);
    expect(merged.map((l) => `${l.container}:${l.text}`)).toEqual(["web-1:w1", "db-1:d1", "web-1:w2", "web-1:w3", "db-1:d2"]);
    expect(merged[1]).toMatchObject({ service: "db", stream: "stderr", at: at(20) });
  });

  it("a follow shows only what came after the last line shown, though the engine sends that second's lines again", () => {
    const first = mergeContainerLogs([
      container("web-1", [
        [10, "a"],
        [20, "b"],
      ]),
    ]);
    const one = linesAfter(first, undefined);
    expect(one.fresh.map((l) => l.text)).toEqual(["a", "b"]);
    expect(one.cursor?.at).toEqual(at(20));
    // Asked again since the cursor: "b" comes again (inclusive), and so does a new line at the same time.
    const again = mergeContainerLogs([
      container("web-1", [
        [20, "b"],
        [20, "b2"],
        [25, "c"],
      ]),
    ]);
    const two = linesAfter(again, one.cursor);
    expect(two.fresh.map((l) => l.text)).toEqual(["b2", "c"]);
    expect(linesAfter(again, two.cursor).fresh).toEqual([]);
    // The cursor given is left as it was.
    expect([...one.cursor!.shownAt]).toHaveLength(1);
  });

  it("with no lines there is no time to follow from yet", () => {
    expect(linesAfter([], undefined)).toEqual({ fresh: [], cursor: undefined });
  });

  it("reads since as the CLI's --since does, with a unit", () => {
    expect(parseSince("30s")).toBe(30_000);
    expect(parseSince(" 10m ")).toBe(600_000);
    expect(parseSince("1.5h")).toBe(5_400_000);
    for (const bad of ["10", "ten minutes", "-5m", ""]) expect(() => parseSince(bad), bad).toThrow(/must be a duration like 30s/);
  });
});
