// The process modules supervised on the agent's own clock, whether or not the controller answers:
// heartbeats supervise them too (heartbeats.ts), but an agent that starts while the controller is
// unreachable never gets to a heartbeat (journal recovery comes first and fails), and a module
// that should run must not wait for the controller to come back. So a module that died is
// started again (with the supervisor's crash backoff) within one interval, online or not: the
// active version, which for "latest" resolved offline is the newest installed one.
import type { Logger } from "pino";
import type { ProcessObservation } from "../gen/skipper/v1/resource_pb.js";
import { sleep } from "./engine/sleep.js";

/** Supervises until `signal` aborts, every `everyMs`. */
export async function superviseOnOwnClock(
  supervise: () => Promise<ProcessObservation[]>,
  everyMs: number,
  log: Logger,
  signal: AbortSignal,
): Promise<void> {
  while (!signal.aborted) {
    try {
      await supervise();
    } catch (e) {
      log.warn(
        { action: "supervise", result: "error", metadata: { message: (e as Error).message } },
        "could not supervise process modules",
      );
    }
    await sleep(everyMs, signal);
  }
}
