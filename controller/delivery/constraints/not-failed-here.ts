// NOT_FAILED_HERE: a release that failed in this environment never enters it again by itself
// (an operator may pin it).
import { ConstraintKind as K, ReleaseOutcome } from "../../../gen/skipper/v1/delivery_pb.js";
import { type Evaluator, failed, passed, when } from "./context.js";

export const notFailedHere: Evaluator = (candidate, ctx) => {
  const r = ctx.status.history.find((h) => h.release?.id === candidate.id && h.outcome === ReleaseOutcome.FAILED);
  if (!r) return passed(K.NOT_FAILED_HERE);
  return failed(K.NOT_FAILED_HERE, ctx.envId, `failed here at ${when(r.endedAt)}${r.reason ? ` (${r.reason})` : ""}`);
};
