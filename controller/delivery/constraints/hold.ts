// HOLD: a held environment (a failed verification with HOLD, or an operator's aborted rollout)
// promotes nothing until an operator unpins it.
import { ConstraintKind as K } from "../../../gen/skipper/v1/delivery_pb.js";
import { type Evaluator, passed, pending, when } from "./context.js";

export const hold: Evaluator = (_candidate, ctx) => {
  const h = ctx.status.hold;
  if (!h) return passed(K.HOLD);
  const why = h.reason ? `: ${h.reason}` : "";
  return pending(K.HOLD, ctx.envId, `held since ${when(h.at)} by ${h.actor || "an unknown actor"}${why}: unpin to resume`);
};
