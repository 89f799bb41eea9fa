// deploy_container: one container outside Compose, pinned by digest (Stella's docker agent). Its
// steps, each reading the engine before it acts, so that the order run again after an agent
// restart finishes what the interrupted run began (container-state.ts names the slots):
//
//   check the spec      common/container-rules.ts, as the controller checked it   -> CONTAINER_INVALID
//   look                <name>, <name>-previous, <name>-replaced; one there without
//                       skipper.container=<name> is not ours                     -> CONTAINER_NOT_OURS
//                                                        (the engine silent:       DOCKER_UNAVAILABLE)
//   image               by the pinned digest: pulled only when the engine lacks it,
//                       verified before anything changes  -> DIGEST_MISMATCH, IMAGE_PULL_FAILED, IMAGE_NOT_FOUND
//   already there?      <name> carries this spec's hash (a re-run): started if stopped,
//                       then "wait up" below
//   set the old aside   an older <name>-previous removed, <name> stopped, renamed
//                       <name>-previous                    (crash point agent.container-after-stop)
//                       (no <name> but a <name>-previous: an update interrupted here; kept as
//                       the fallback, and the update goes on)
//   create, start       from the verified image id, with Skipper's labels
//   wait up             healthy by its healthcheck, or running past the settle time (container-ready.ts)
//   finish              <name>-previous removed (kept with keep_previous)             -> CONTAINER_OK
//   or roll back        the new one removed, <name>-previous renamed back and started -> ROLLED_BACK,
//                       or, with nothing to go back to, CONTAINER_FAILED
import { performance } from "node:perf_hooks";
import type { ContainerSpec } from "../../gen/skipper/v1/order_action_pb.js";
import { containerSpecProblem } from "../../common/container-rules.js";
import { crashPoint } from "../../common/crash-points.js";
import { durationMs } from "@bufbuild/protobuf/wkt";
import {
  inspectContainer,
  removeContainer,
  renameContainer,
  startContainer,
  stopContainer,
  type ContainerFacts,
} from "../engine/container-engine.js";
import { EngineError } from "../engine/project-containers.js";
import { runCommand } from "../engine/run-command.js";
import { createFromSpec, mountSourcesProblem, secretValues, specHash } from "./container-create.js";
import { verifyImage, type VerifiedImage } from "./container-image.js";
import { waitUp } from "./container-ready.js";
import { deploymentOf, LABEL, look, slotsOf, type Slots } from "./container-state.js";
import { executorOf, orderOutcome, type ExecContext, type ExecOutcome } from "./executor.js";

const DEFAULT_READY_MS = 60_000;
const DEFAULT_SETTLE_MS = 3_000;
const DEFAULT_STOP_SECONDS = 10;

export const deployContainer = executorOf("deployContainer", async (action, order, ctx) => {
  const started = performance.now();
  const spec = action?.spec;
  if (!spec)
    return orderOutcome("CONTAINER_INVALID", "the order carries no container (action.deploy_container.spec)", started, { success: false });
  const problem = containerSpecProblem(spec, "action.deploy_container.spec");
  if (problem) return orderOutcome("CONTAINER_INVALID", `${problem.field} ${problem.problem}`, started, { success: false });
  const linked = await mountSourcesProblem(ctx.config.workDir, spec);
  if (linked) return orderOutcome("CONTAINER_INVALID", `action.deploy_container.spec.${linked}`, started, { success: false });
  const u = new Update(spec, order.id, ctx, started);
  try {
    return await u.run();
  } catch (e) {
    if (!(e instanceof EngineError)) throw e;
    // Every step reads the engine first: run again, the order takes up where this one stopped.
    return u.end("DOCKER_UNAVAILABLE", `${e.message} (after: ${u.steps.join(", ") || "nothing"})`, { retriable: true });
  }
});

/** One deploy_container run: the state its steps share. */
class Update {
  readonly slots: Slots;
  readonly steps: string[] = [];
  private previous: ContainerFacts | undefined;
  private image: VerifiedImage | undefined;
  private resumed = false;

  constructor(
    readonly spec: ContainerSpec,
    readonly orderId: string,
    readonly ctx: ExecContext,
    readonly started: number,
  ) {
    this.slots = slotsOf(spec.name);
  }

  async run(): Promise<ExecOutcome> {
    const { seen, foreign } = await look(this.slots);
    if (foreign)
      return this.end("CONTAINER_NOT_OURS", `container ${foreign} was not made by skippy (no ${LABEL.container}=${this.spec.name} label)`);
    const verified = await verifyImage(this.spec.image, this.spec.digest || digestIn(this.spec.image), this.ctx.signal);
    if (!verified.ok) return this.end(verified.code, verified.message, { retriable: verified.retriable });
    this.image = verified.image;
    this.step(verified.image.pulled ? "pull" : "image-local", "verify");
    if (seen.replaced) await this.act("drop-replaced", () => removeContainer(this.slots.replaced));
    this.previous = seen.previous;
    const hash = specHash(this.spec, verified.image.id);
    if (seen.current?.labels[LABEL.spec] === hash) return this.already(seen.current);
    if (seen.current) await this.setAside(seen.current);
    else if (this.previous) this.resumed = true;
    const made = {
      imageId: verified.image.id,
      digest: verified.image.digest,
      hash,
      orderId: this.orderId,
      workDir: this.ctx.config.workDir,
    };
    return this.refusedOr(async () => {
      await this.act("create", () => createFromSpec(this.spec, made));
      await this.act("start", () => startContainer(this.slots.name));
    });
  }

  /**
   * Runs `create` (the new container's create and start), then waits for it; an engine that
   * refuses them (a host port another container holds, a mount it cannot make) is a container that
   * did not come up, rolled back like one.
   */
  private async refusedOr(create: () => Promise<void>): Promise<ExecOutcome> {
    try {
      await create();
    } catch (e) {
      if (!(e instanceof EngineError)) throw e;
      return this.rollBack(`the engine refused it: ${e.run.stderr.trim().split("\n").pop() ?? e.message}`, false);
    }
    return this.waitThenFinish();
  }

  /** `<name>` is this spec's container already: a run of the same order again, or nothing to do. */
  private async already(current: ContainerFacts): Promise<ExecOutcome> {
    this.resumed = this.previous !== undefined || !current.running;
    return this.refusedOr(async () => {
      if (!current.running) await this.act("start", () => startContainer(this.slots.name));
    });
  }

  /** The running container stopped and renamed <name>-previous (an older previous removed first). */
  private async setAside(current: ContainerFacts): Promise<void> {
    if (this.previous) await this.act("remove-older-previous", () => removeContainer(this.slots.previous));
    await this.act("stop-old", () => stopContainer(this.slots.name, this.spec.stopTimeoutSeconds || DEFAULT_STOP_SECONDS));
    await this.act("rename-old", () => renameContainer(this.slots.name, this.slots.previous));
    this.previous = { ...current, name: this.slots.previous, running: false };
    crashPoint("agent.container-after-stop");
  }

  private async waitThenFinish(): Promise<ExecOutcome> {
    const ready = await waitUp(this.slots.name, {
      timeoutMs: this.spec.readyTimeout ? durationMs(this.spec.readyTimeout) : DEFAULT_READY_MS,
      settleMs: this.spec.settle ? durationMs(this.spec.settle) : DEFAULT_SETTLE_MS,
      signal: this.ctx.signal,
    });
    this.step("wait-up");
    if (!ready.up) return this.rollBack(ready.why, ready.aborted);
    const keep = this.spec.keepPrevious && this.previous !== undefined;
    if (this.previous && !keep) await this.act("remove-previous", () => removeContainer(this.slots.previous));
    const digest = ready.container.labels[LABEL.digest] ?? "";
    const before = this.previous ? `; the previous container ${keep ? `is kept as ${this.slots.previous}` : "was removed"}` : "";
    const again = this.resumed ? " (finishing an update an earlier run left unfinished)" : "";
    return this.end("CONTAINER_OK", `${this.slots.name} runs ${this.spec.image} at ${digest}${before}${again}`, {
      success: true,
      current: ready.container,
      previousKept: keep,
    });
  }

  /** The new container did not come up: it goes, and the previous one runs again. */
  private async rollBack(why: string, aborted: boolean): Promise<ExecOutcome> {
    // A lost lease means another holder may run the order now: change nothing more.
    if (this.ctx.lease?.aborted) return this.end("CANCELLED", `stopped (${why}); the lease was lost, nothing was undone`);
    const logs = await lastLines(this.slots.name, secretValues(this.spec));
    await this.act("remove-new", () => removeContainer(this.slots.name));
    const code = aborted ? "CANCELLED" : this.previous ? "ROLLED_BACK" : "CONTAINER_FAILED";
    const tail = logs ? `; its last output: ${logs}` : "";
    if (!this.previous) return this.end(code, `the new container did not come up: ${why}; it was removed${tail}`);
    await this.act("rename-previous-back", () => renameContainer(this.slots.previous, this.slots.name));
    await this.act("start-previous", () => startContainer(this.slots.name));
    const current = await inspectContainer(this.slots.name);
    const digest = current?.labels[LABEL.digest] ?? "";
    return this.end(
      code,
      `the new container did not come up: ${why}; ${this.slots.name} runs the previous container again (${digest})${tail}`,
      {
        current,
      },
    );
  }

  private async act(step: string, fn: () => Promise<unknown>): Promise<void> {
    await fn();
    this.step(step);
  }

  private step(...names: string[]): void {
    this.steps.push(...names);
  }

  end(
    code: string,
    message: string,
    opts: { success?: boolean; retriable?: boolean; current?: ContainerFacts; previousKept?: boolean } = {},
  ): ExecOutcome {
    const container = deploymentOf(this.slots.name, opts.current, opts.previousKept ? this.previous : undefined, {
      steps: this.steps,
      pulled: this.image?.pulled,
      resumed: this.resumed,
      previousKept: opts.previousKept,
    });
    if (this.previous && !opts.previousKept) {
      container.previousContainerId = this.previous.id;
      container.previousDigest = this.previous.labels[LABEL.digest] ?? "";
    }
    return orderOutcome(code, message, this.started, {
      success: opts.success ?? false,
      retriable: opts.retriable ?? false,
      details: { container },
    });
  }
}

/** The digest a reference carries (repo@sha256:…), or "". */
function digestIn(image: string): string {
  const at = image.lastIndexOf("@");
  return at < 0 ? "" : image.slice(at + 1);
}

/** The container's last few lines of output, on one line, secret values blanked ("" when none). */
async function lastLines(name: string, secrets: string[]): Promise<string> {
  const run = await runCommand("docker", ["container", "logs", "--tail", "5", "--", name], { timeoutMs: 10_000, secrets });
  const text = `${run.stdout}\n${run.stderr}`.trim().split("\n").filter(Boolean).join(" | ");
  return run.exitCode === 0 ? text.slice(0, 500) : "";
}
