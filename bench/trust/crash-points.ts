// Named crash points (common/crash-points.ts): the full run drives every point through its test
// (test/crash-points-*.test.ts: the process kills itself there, restarts, and the test checks that
// no acknowledged write is lost, nothing half-written is visible and every order ends once) and
// counts the points passed. The short run leaves them to `npm test`, which runs the same files.
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { exactly, info, type Figure, type Probe } from "./figures.js";

const SECTION = "crash points";
const REPO = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");

interface VitestJson {
  testResults: { assertionResults: { title: string; status: string }[] }[];
}

export const crashPointsProbe: Probe = {
  name: "crash-points",
  async run({ short, workDir, log }) {
    if (short) return [info(SECTION, "points killed at, restarted and checked", "run by npm test (test/crash-points-*.test.ts)")];
    const out = join(workDir, "vitest.json");
    await new Promise<void>((done) => {
      execFile(
        process.execPath,
        [join(REPO, "node_modules", "vitest", "vitest.mjs"), "run", "test/crash-points-", "--reporter=json", `--outputFile=${out}`],
        { cwd: REPO, env: { ...process.env, SKIPPER_TEST_DOCKER: "0" }, maxBuffer: 64 * 1024 * 1024 },
        () => done(),
      );
    });
    const report = JSON.parse(await readFile(out, "utf8")) as VitestJson;
    const tests = report.testResults.flatMap((f) => f.assertionResults);
    const points = new Map<string, boolean>();
    for (const t of tests) {
      const point = /^([a-z]+\.[a-z-]+):/.exec(t.title)?.[1];
      if (point) points.set(point, (points.get(point) ?? true) && t.status === "passed");
    }
    const failed = [...points].filter(([, ok]) => !ok).map(([p]) => p);
    if (failed.length) log(`failed: ${failed.join(", ")}`);
    const figures: Figure[] = [
      info(SECTION, "points", [...points.keys()].join(", ")),
      exactly(SECTION, "points where a kill lost a write, showed a torn record or ended an order twice", failed.length, 0, points.size),
      exactly(SECTION, "crash-point tests failed", tests.filter((t) => t.status !== "passed").length, 0, tests.length),
    ];
    return figures;
  },
};
