// ALLOWED_TIMES: a promotion starts only inside one of the environment's allowed times (the
// maintenance windows' functions); outside them it waits for the next opening.
import { ConstraintKind as K } from "../../../gen/skipper/v1/delivery_pb.js";
import { nextOpening, windowOpen } from "../../resources/maintenance-window.js";
import { type Evaluator, passed, pending, when } from "./context.js";

export const allowedTimes: Evaluator = (_candidate, ctx) => {
  const windows = ctx.spec.allowedTimes;
  if (windowOpen(windows, ctx.now)) return passed(K.ALLOWED_TIMES);
  const next = nextOpening(windows, ctx.now);
  const reason =
    next === undefined
      ? "outside the allowed times, and none opens within a week"
      : `outside the allowed times; the next opens at ${when(next)}`;
  return pending(K.ALLOWED_TIMES, ctx.envId, reason, next);
};
