// Whether a container the executor started is up: healthy by its healthcheck, or (without one)
// running, never restarted, for the settle time. Read from the engine every quarter second until
// one of them is known or the time runs out.
import { inspectContainer, type ContainerFacts } from "../engine/container-engine.js";
import { sleep } from "../engine/sleep.js";

const POLL_MS = 250;

export type Readiness = { up: true; container: ContainerFacts } | { up: false; why: string; aborted: boolean };

/** Waits until `name` is up, has failed, `timeoutMs` passed or `signal` aborted. */
export async function waitUp(name: string, opts: { timeoutMs: number; settleMs: number; signal: AbortSignal }): Promise<Readiness> {
  const deadline = performance.now() + opts.timeoutMs;
  let first: ContainerFacts | undefined;
  let runningSince = 0;
  for (;;) {
    if (opts.signal.aborted) return { up: false, why: "the order was stopped while the container came up", aborted: true };
    const c = await inspectContainer(name);
    if (!c) return { up: false, why: `container ${name} disappeared`, aborted: false };
    first ??= c;
    const failed = failure(c, first);
    if (failed) return { up: false, why: failed, aborted: false };
    if (c.health === "healthy") return { up: true, container: c };
    if (c.health === "" && c.running) {
      runningSince ||= performance.now();
      if (performance.now() - runningSince >= opts.settleMs) return { up: true, container: c };
    }
    if (performance.now() >= deadline) {
      const state = c.health ? `health ${c.health}` : `running for less than ${Math.round(opts.settleMs / 100) / 10}s`;
      return { up: false, why: `not up after ${Math.round(opts.timeoutMs / 1000)}s (${state})`, aborted: false };
    }
    await sleep(POLL_MS, opts.signal);
  }
}

/** Why `c` cannot come up any more, or undefined while it may. */
function failure(c: ContainerFacts, first: ContainerFacts): string | undefined {
  if (c.health === "unhealthy") return "its healthcheck reports unhealthy";
  // Its exit code is gone once the engine started it again (running: 0), so it is said only when stopped.
  if (c.restartCount > first.restartCount || c.startedAt !== first.startedAt)
    return `it exited${c.running ? "" : ` with code ${c.exitCode}`} and its restart policy started it again`;
  if (!c.running && c.status !== "created") return `it exited with code ${c.exitCode} (${c.status})`;
  return undefined;
}
