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
    const k = new KillRounds(dataDir, await startController({ dataDir }), log);
    const running = Array.from({ length: writers }, (_, w) => k.writer(w));
    for (let round = 0; round < rounds; round++) {
      if (!(await k.round(round, short))) break;
      if ((round + 1) % 10 === 0 || short) log(`round ${round + 1}/${rounds}: ${k.acked.size} acknowledged so far`);
    }
    k.stopping = true;
    if (k.hung.length) log(`hung: ${k.hung.join("; ")}`);
    // Every way out of the rounds marked the controller up, so no writer waits on it; each write has its bound.
    await withTimeout(Promise.all(running), BOUNDS.call * 2);
    const lost = await k.lostWrites();
    if (lost && lost.length > 0) log(`lost: ${lost.slice(0, 10).join(", ")}`);
    if (!lost) log("no controller answered the final read: lost writes unknown");
    await withTimeout(k.ctl.stop(), BOUNDS.kill * 2);
    return k.figures(rounds, lost, short);
  },
};

/** The rounds' state: the controller of the moment, what the writers got acknowledged, how the rounds went. */
class KillRounds {
  readonly acked = new Set<string>();
  readonly hung: string[] = [];
  stopping = false;
  private readonly port: number;
  private attempted = 0;
  // Resolves when the controller is serving again after a kill.
  private up: Promise<void> = Promise.resolve();
  private roundAcks = 0;
  private onAck: (() => void) | undefined;
  private readonly restarts: number[] = [];
  private failedRestarts = 0;
  private done = 0;

  constructor(
    private readonly dataDir: string,
    public ctl: ControllerProcess,
    private readonly log: (m: string) => void,
  ) {
    this.port = ctl.port;
  }

  /** One writer: creates tenants as fast as the controller of the moment acknowledges them, until stopping. */
  async writer(w: number): Promise<void> {
    for (let n = 0; !this.stopping; n++) {
      await this.up;
      if (this.stopping) break;
      const id = `kr-${w}-${n}`;
      this.attempted++;
      try {
        await this.ctl.admin(ResourceService).createResource(
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
        this.acked.add(id);
        this.roundAcks++;
        this.onAck?.();
      } catch {
        // In flight at the kill: stored or not, never acknowledged. The next id is a new one.
      }
    }
  }

  /** One round: a random number of acknowledged writes, the kill, the restart; false when it hung (the rounds stop). */
  async round(round: number, short: boolean): Promise<boolean> {
    const target = 10 + Math.floor(Math.random() * (short ? 40 : 200));
    this.roundAcks = 0;
    const reached = await withTimeout(
      new Promise<true>((r) => {
        this.onAck = () => {
          if (this.roundAcks >= target) r(true);
        };
      }),
      BOUNDS.acks,
    );
    this.onAck = undefined;
    if (!reached) {
      this.hung.push(`round ${round + 1}: ${this.roundAcks} of ${target} writes acknowledged in ${BOUNDS.acks / 1000} s`);
      return false;
    }
    let markUp: () => void = () => undefined;
    this.up = new Promise((r) => {
      markUp = r;
    });
    if (
      (await withTimeout(
        this.ctl.kill().then(() => true),
        BOUNDS.kill,
      )) === undefined
    ) {
      this.hung.push(`round ${round + 1}: the killed controller not reaped in ${BOUNDS.kill / 1000} s`);
      markUp();
      return false;
    }
    const restarted = await this.restartAfterKill(round);
    markUp();
    if (restarted) this.done++;
    return restarted;
  }

  // Restarts the killed controller, timed to its first answered read; a failed restart is counted
  // and tried once more, and a second failure hangs the round (false).
  private async restartAfterKill(round: number): Promise<boolean> {
    const started = performance.now();
    let next = await this.restart();
    if (typeof next !== "string") {
      this.ctl = next;
      const read = await this.ctl
        .admin(ResourceService)
        .listResources({ resourceType: "tenant", pageSize: 1 }, { timeoutMs: BOUNDS.call })
        .then(
          () => "ok",
          (e: unknown) => (e as Error).message,
        );
      if (read === "ok") this.restarts.push(performance.now() - started);
      else next = `first read: ${read}`;
    }
    if (typeof next === "string") {
      this.failedRestarts++;
      this.log(`restart ${round + 1} failed: ${next}`);
      await withTimeout(this.ctl.kill(), BOUNDS.kill);
      const again = await this.restart();
      if (typeof again === "string") {
        this.hung.push(`round ${round + 1}: restart failed twice (${again})`);
        return false;
      }
      this.ctl = again;
    }
    return true;
  }

  // A controller on the data directory within the bound, or why not (one that listens late is killed then).
  private async restart(): Promise<ControllerProcess | string> {
    const starting = startController({ dataDir: this.dataDir, port: this.port });
    const started = await withTimeout(
      starting.then(
        (c) => c,
        (e: unknown) => `failed: ${(e as Error).message}`,
      ),
      BOUNDS.restart,
    );
    if (started === undefined) void starting.then((c) => c.kill()).catch(() => undefined);
    return started ?? `not listening after ${BOUNDS.restart / 1000} s`;
  }

  /** The acknowledged writes missing at the end; undefined when no controller answered the final read. */
  async lostWrites(): Promise<string[] | undefined> {
    // After a hung round, the last word on lost writes comes from a controller restarted on the data directory.
    if (
      !this.ctl.alive() ||
      (await this.ctl
        .admin(ResourceService)
        .listResources({ resourceType: "tenant", pageSize: 1 }, { timeoutMs: BOUNDS.call })
        .then(
          () => false,
          () => true,
        ))
    ) {
      await withTimeout(this.ctl.kill(), BOUNDS.kill);
      const last = await this.restart();
      if (typeof last !== "string") this.ctl = last;
    }
    const present = await withTimeout(allTenantIds(this.ctl), BOUNDS.call * 4).catch(() => undefined);
    return present ? [...this.acked].filter((id) => !present.has(id)) : undefined;
  }

  /** The probe's figures, with their bars. */
  figures(rounds: number, lost: string[] | undefined, short: boolean): Figure[] {
    const { restarts, acked } = this;
    restarts.sort((a, b) => a - b);
    return [
      info(SECTION, "rounds (16 concurrent writers)", String(rounds)),
      exactly(
        SECTION,
        `rounds that hung (acks ${BOUNDS.acks / 1000} s, kill ${BOUNDS.kill / 1000} s, restart ${BOUNDS.restart / 1000} s, a call ${BOUNDS.call / 1000} s)`,
        this.hung.length,
        0,
        rounds,
      ),
      exactly(SECTION, "rounds completed", this.done, rounds),
      info(SECTION, "writes acknowledged / attempted", `${acked.size.toLocaleString("en-US")} / ${this.attempted.toLocaleString("en-US")}`),
      // Unknown (no controller answered the final read) fails the bar.
      exactly(SECTION, "acknowledged writes lost", lost?.length ?? Number.NaN, 0, acked.size),
      exactly(SECTION, "restarts that failed", this.failedRestarts, 0, rounds),
      // A timing bar only in the full run: the short one runs in CI beside other tests on a busy machine.
      restartFigure("restart to first answered read, p50", percentile(restarts, 50), short),
      restartFigure("restart to first answered read, max", restarts.at(-1) ?? NaN, short),
    ];
  }
}

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
