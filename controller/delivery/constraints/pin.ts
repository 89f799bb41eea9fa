// PIN: a pinned environment promotes nothing but its pin (step 0 of the plan); unpin to resume.
import { ConstraintKind as K } from "../../../gen/skipper/v1/delivery_pb.js";
import { byWhom, type Evaluator, passed, pending } from "./context.js";

export const pin: Evaluator = (_candidate, ctx) => {
  const p = ctx.status.pin;
  if (!p) return passed(K.PIN);
  const to = p.release?.id ?? "a release";
  return pending(K.PIN, to, `pinned to ${to} by ${byWhom(p.pinned)}: unpin to promote`);
};
