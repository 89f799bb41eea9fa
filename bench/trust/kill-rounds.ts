// kill -9 under load: writers create tenants through the API as fast as they can; after a number
// of acknowledged writes picked at random for the round (observed progress, not time), the
// controller is killed with SIGKILL, then restarted on the same data directory and port. At the
// end every acknowledged write must be there. Restart time runs from spawn to the first answered
// authenticated read. Every wait of a round has a bound (the acknowledged writes it waits for, the
// kill, the restart, the first read; each write too): a round that passes one is a hung round, a
// failed figure, and the rounds stop there (one once hung after 7 of 40 with no socket open).
import { create } from "@bufbuild/protobuf";
import { ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { percentile } from "../measure.js";
import { atMost, exactly, info, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { withTimeout } from "./stalled-streams.js";
import { join } from "node:path";

const SECTION = "kill -9 under load";
// The bounds of a round's waits, in ms (a write and the first read carry their own).
const BOUNDS = { acks: 60_000, kill: 10_000, restart: 30_000, call: 15_000 };

export const killRoundsProbe: Probe = {
  name: "kill-rounds",
  async run({ short, workDir, log }) {
    const rounds = short ? 5 : 40;
    const writers = 16;
    const dataDir = join(workDir, "data");
    let ctl = await startController({ dataDir });
    const port = ctl.port;
    const acked = new Set<string>();
    let attempted = 0;
    let stopping = false;
    // Resolves when the controller is serving again after a kill.
    let up: Promise<void> = Promise.resolve();
    let roundAcks = 0;
    let onAck: (() => void) | undefined;
    const writer = async (w: number) => {
      for (let n = 0; !stopping; n++) {
        await up;
        if (stopping) break;
        const id = `kr-${w}-${n}`;
        attempted++;
        try {
          await ctl.admin(ResourceService).createResource(
            {
              resourceType: "tenant",
              resource: create(ResourceSchema, {
                id,
                resourceType: "tenant",
                desiredState: { kind: { case: "tenant", value: { displayName: id } } },
              }),
            },
            { timeoutMs: BOUNDS.call },
          );
          acked.add(id);
          roundAcks++;
          onAck?.();
        } catch {
          // In flight at the kill: stored or not, never acknowledged. The next id is a new one.
        }
      }
    };
    const running = Array.from({ length: writers }, (_, w) => writer(w));
    const restarts: number[] = [];
    let failedRestarts = 0;
    const hung: string[] = [];
    let done = 0;
    // A controller on the data directory within the bound, or why not (one that listens late is killed then).
    const restart = async (): Promise<ControllerProcess | string> => {
      const starting = startController({ dataDir, port });
      const started = await withTimeout(
        starting.then(
          (c) => c,
          (e: unknown) => `failed: ${(e as Error).message}`,
        ),
        BOUNDS.restart,
      );
      if (started === undefined) void starting.then((c) => c.kill()).catch(() => undefined);
      return started ?? `not listening after ${BOUNDS.restart / 1000} s`;
    };
    for (let round = 0; round < rounds; round++) {
      const target = 10 + Math.floor(Math.random() * (short ? 40 : 200));
      roundAcks = 0;
      const reached = await withTimeout(
        new Promise<true>((r) => {
          onAck = () => {
            if (roundAcks >= target) r(true);
          };
        }),
        BOUNDS.acks,
      );
      onAck = undefined;
      if (!reached) {
        hung.push(`round ${round + 1}: ${roundAcks} of ${target} writes acknowledged in ${BOUNDS.acks / 1000} s`);
        break;
      }
      let markUp: () => void = () => undefined;
      up = new Promise((r) => {
        markUp = r;
      });
      if (
        (await withTimeout(
          ctl.kill().then(() => true),
          BOUNDS.kill,
        )) === undefined
      ) {
        hung.push(`round ${round + 1}: the killed controller not reaped in ${BOUNDS.kill / 1000} s`);
        markUp();
        break;
      }
      const started = performance.now();
      let next = await restart();
      if (typeof next !== "string") {
        ctl = next;
        const read = await ctl
          .admin(ResourceService)
          .listResources({ resourceType: "tenant", pageSize: 1 }, { timeoutMs: BOUNDS.call })
          .then(
            () => "ok",
            (e: unknown) => (e as Error).message,
          );
        if (read === "ok") restarts.push(performance.now() - started);
        else next = `first read: ${read}`;
      }
      if (typeof next === "string") {
        failedRestarts++;
        log(`restart ${round + 1} failed: ${next}`);
        await withTimeout(ctl.kill(), BOUNDS.kill);
        const again = await restart();
        if (typeof again === "string") {
          hung.push(`round ${round + 1}: restart failed twice (${again})`);
          markUp();
          break;
        }
        ctl = again;
      }
      markUp();
      done++;
      if ((round + 1) % 10 === 0 || short) log(`round ${round + 1}/${rounds}: ${acked.size} acknowledged so far`);
    }
    stopping = true;
    if (hung.length) log(`hung: ${hung.join("; ")}`);
    // Every way out of the rounds marked the controller up, so no writer waits on it; each write has its bound.
    await withTimeout(Promise.all(running), BOUNDS.call * 2);
    // After a hung round, the last word on lost writes comes from a controller restarted on the data directory.
    if (
      !ctl.alive() ||
      (await ctl
        .admin(ResourceService)
        .listResources({ resourceType: "tenant", pageSize: 1 }, { timeoutMs: BOUNDS.call })
        .then(
          () => false,
          () => true,
        ))
    ) {
      await withTimeout(ctl.kill(), BOUNDS.kill);
      const last = await restart();
      if (typeof last !== "string") ctl = last;
    }
    const present = await withTimeout(allTenantIds(ctl), BOUNDS.call * 4).catch(() => undefined);
    const lost = present ? [...acked].filter((id) => !present.has(id)) : undefined;
    if (lost && lost.length > 0) log(`lost: ${lost.slice(0, 10).join(", ")}`);
    if (!lost) log("no controller answered the final read: lost writes unknown");
    await withTimeout(ctl.stop(), BOUNDS.kill * 2);
    restarts.sort((a, b) => a - b);
    const figures: Figure[] = [
      info(SECTION, "rounds (16 concurrent writers)", String(rounds)),
      exactly(
        SECTION,
        `rounds that hung (acks ${BOUNDS.acks / 1000} s, kill ${BOUNDS.kill / 1000} s, restart ${BOUNDS.restart / 1000} s, a call ${BOUNDS.call / 1000} s)`,
        hung.length,
        0,
        rounds,
      ),
      exactly(SECTION, "rounds completed", done, rounds),
      info(SECTION, "writes acknowledged / attempted", `${acked.size.toLocaleString("en-US")} / ${attempted.toLocaleString("en-US")}`),
      // Unknown (no controller answered the final read) fails the bar.
      exactly(SECTION, "acknowledged writes lost", lost?.length ?? Number.NaN, 0, acked.size),
      exactly(SECTION, "restarts that failed", failedRestarts, 0, rounds),
      // A timing bar only in the full run: the short one runs in CI beside other tests on a busy machine.
      restartFigure("restart to first answered read, p50", percentile(restarts, 50), short),
      restartFigure("restart to first answered read, max", restarts.at(-1) ?? NaN, short),
    ];
    return figures;
  },
};

async function allTenantIds(ctl: ControllerProcess): Promise<Set<string>> {
  const ids = new Set<string>();
  let pageToken = "";
  do {
    const page = await ctl
      .admin(ResourceService)
      .listResources({ resourceType: "tenant", pageSize: 1000, pageToken }, { timeoutMs: BOUNDS.call });
    for (const r of page.resources) ids.add(r.id);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return ids;
}

function restartFigure(name: string, ms: number, short: boolean): Figure {
  return short ? info(SECTION, name, `${Math.round(ms).toLocaleString("en-US")} ms`) : atMost(SECTION, name, Math.round(ms), 2000, "ms");
}
