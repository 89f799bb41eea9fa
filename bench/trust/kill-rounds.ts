// kill -9 under load: writers create tenants through the API as fast as they can; after a number
// of acknowledged writes picked at random for the round (observed progress, not time), the
// controller is killed with SIGKILL, then restarted on the same data directory and port. At the
// end every acknowledged write must be there. Restart time runs from spawn to the first answered
// authenticated read.
import { create } from "@bufbuild/protobuf";
import { ResourceSchema } from "../../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../../gen/skipper/v1/resource_service_pb.js";
import { percentile } from "../measure.js";
import { atMost, exactly, info, type Figure, type Probe } from "./figures.js";
import { startController, type ControllerProcess } from "./controller-process.js";
import { join } from "node:path";

const SECTION = "kill -9 under load";

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
          await ctl.admin(ResourceService).createResource({
            resourceType: "tenant",
            resource: create(ResourceSchema, {
              id,
              resourceType: "tenant",
              desiredState: { kind: { case: "tenant", value: { displayName: id } } },
            }),
          });
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
    for (let round = 0; round < rounds; round++) {
      const target = 10 + Math.floor(Math.random() * (short ? 40 : 200));
      roundAcks = 0;
      await new Promise<void>((r) => {
        onAck = () => {
          if (roundAcks >= target) r();
        };
      });
      onAck = undefined;
      let markUp: () => void = () => undefined;
      up = new Promise((r) => {
        markUp = r;
      });
      await ctl.kill();
      const started = performance.now();
      try {
        ctl = await startController({ dataDir, port });
        await ctl.admin(ResourceService).listResources({ resourceType: "tenant", pageSize: 1 });
        restarts.push(performance.now() - started);
      } catch (e) {
        failedRestarts++;
        log(`restart ${round + 1} failed: ${(e as Error).message}`);
        ctl = await startController({ dataDir, port });
      }
      markUp();
      if ((round + 1) % 10 === 0 || short) log(`round ${round + 1}/${rounds}: ${acked.size} acknowledged so far`);
    }
    stopping = true;
    await Promise.all(running);
    const present = await allTenantIds(ctl);
    const lost = [...acked].filter((id) => !present.has(id));
    if (lost.length > 0) log(`lost: ${lost.slice(0, 10).join(", ")}`);
    await ctl.stop();
    restarts.sort((a, b) => a - b);
    const figures: Figure[] = [
      info(SECTION, "rounds (16 concurrent writers)", String(rounds)),
      info(SECTION, "writes acknowledged / attempted", `${acked.size.toLocaleString("en-US")} / ${attempted.toLocaleString("en-US")}`),
      exactly(SECTION, "acknowledged writes lost", lost.length, 0, acked.size),
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
    const page = await ctl.admin(ResourceService).listResources({ resourceType: "tenant", pageSize: 1000, pageToken });
    for (const r of page.resources) ids.add(r.id);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return ids;
}

function restartFigure(name: string, ms: number, short: boolean): Figure {
  return short ? info(SECTION, name, `${Math.round(ms).toLocaleString("en-US")} ms`) : atMost(SECTION, name, Math.round(ms), 2000, "ms");
}
