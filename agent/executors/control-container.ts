// control_container: a rollback or a removal of a container deploy_container made, by renames
// only (nothing is pulled or created, so it works with the registry gone). Like the deploy, each
// step reads the engine first, so the order run again after an agent restart finishes it.
//
//   check               the name (common/container-rules.ts), the operation        -> CONTAINER_INVALID
//   look                the slots; one not ours                                    -> CONTAINER_NOT_OURS
//   rollback            <name> stopped and renamed <name>-replaced, <name>-previous renamed <name>,
//                       <name>-replaced renamed <name>-previous, <name> started and up
//                       (a second rollback rolls forward again); with no <name>, the previous
//                       one is restored                                -> ROLLBACK_OK, NO_PREVIOUS, ROLLBACK_FAILED
//   remove              every slot's container removed                             -> REMOVE_OK
import { ContainerOperation } from "../../gen/skipper/v1/order_action_pb.js";
import { containerNameProblem } from "../../common/container-rules.js";
import { inspectContainer, removeContainer, renameContainer, startContainer, stopContainer } from "../engine/container-engine.js";
import { EngineError } from "../engine/project-containers.js";
import { waitUp } from "./container-ready.js";
import { deploymentOf, LABEL, look, slotsOf, type Seen, type Slots } from "./container-state.js";
import { executorOf, orderOutcome, type ExecContext, type ExecOutcome } from "./executor.js";

const RESTORED_SETTLE_MS = 1_000;
const RESTORED_READY_MS = 60_000;

export const controlContainer = executorOf("controlContainer", async (action, _order, ctx) => {
  const started = performance.now();
  const steps: string[] = [];
  const end = (code: string, message: string, opts: { success?: boolean; retriable?: boolean; seen?: Seen } = {}) =>
    orderOutcome(code, message, started, {
      success: opts.success ?? false,
      retriable: opts.retriable ?? false,
      details: action
        ? { container: deploymentOf(action.name, opts.seen?.current, opts.seen?.previous, { steps, previousKept: !!opts.seen?.previous }) }
        : {},
    });
  if (!action) return end("CONTAINER_INVALID", "the order carries no action (action.control_container)");
  const problem = containerNameProblem(action.name);
  if (problem) return end("CONTAINER_INVALID", `action.control_container.name ${problem}`);
  const slots = slotsOf(action.name);
  const act = async (step: string, fn: () => Promise<unknown>) => {
    await fn();
    steps.push(step);
  };
  try {
    const { seen, foreign } = await look(slots);
    if (foreign)
      return end("CONTAINER_NOT_OURS", `container ${foreign} was not made by skippy (no ${LABEL.container}=${action.name} label)`);
    if (action.operation === ContainerOperation.REMOVE) {
      for (const n of [slots.name, slots.previous, slots.replaced]) await act(`remove ${n}`, () => removeContainer(n));
      return end("REMOVE_OK", `${action.name} and the containers kept beside it are removed`, { success: true });
    }
    if (action.operation !== ContainerOperation.ROLLBACK)
      return end("CONTAINER_INVALID", "action.control_container.operation must be ROLLBACK or REMOVE");
    return await rollBack(slots, seen, ctx, act, end);
  } catch (e) {
    if (!(e instanceof EngineError)) throw e;
    return end("DOCKER_UNAVAILABLE", `${e.message} (after: ${steps.join(", ") || "nothing"})`, { retriable: true });
  }
});

type Act = (step: string, fn: () => Promise<unknown>) => Promise<void>;
type End = (code: string, message: string, opts?: { success?: boolean; seen?: Seen }) => ExecOutcome;

async function rollBack(slots: Slots, seen: Seen, ctx: ExecContext, act: Act, end: End): Promise<ExecOutcome> {
  let { current, previous } = seen;
  const swapping = seen.replaced !== undefined;
  if (!swapping && !previous)
    return end("NO_PREVIOUS", `no ${slots.previous} is kept on this node to roll back to (deploy with keep_previous to keep one)`);
  if (!swapping && current) {
    await act("stop-current", () => stopContainer(slots.name, 10));
    await act("rename-current-aside", () => renameContainer(slots.name, slots.replaced));
    current = undefined;
  }
  if (!current && previous) {
    await act("rename-previous-back", () => renameContainer(slots.previous, slots.name));
    previous = undefined;
  }
  if (!previous && (await inspectContainer(slots.replaced)))
    await act("keep-replaced-as-previous", () => renameContainer(slots.replaced, slots.previous));
  await act("start", () => startContainer(slots.name));
  const ready = await waitUp(slots.name, { timeoutMs: RESTORED_READY_MS, settleMs: RESTORED_SETTLE_MS, signal: ctx.signal });
  const after = { current: await inspectContainer(slots.name), previous: await inspectContainer(slots.previous) };
  if (!ready.up)
    return end("ROLLBACK_FAILED", `${slots.name} is the previous container again but it is not up: ${ready.why}`, { seen: after });
  const digest = after.current?.labels[LABEL.digest] ?? "";
  const kept = after.previous ? `; the one it replaced is kept as ${slots.previous}` : "";
  return end("ROLLBACK_OK", `${slots.name} runs the previous container again (${digest})${kept}`, { success: true, seen: after });
}
