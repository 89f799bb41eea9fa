// ONE_IN_FLIGHT: one release is in flight per environment; a newer candidate waits and never
// supersedes a release being deployed or verified.
import { ConstraintKind as K, PromotionPhase } from "../../../gen/skipper/v1/delivery_pb.js";
import { requiredPasses } from "../verification-spec.js";
import { type Evaluator, passed, pending } from "./context.js";

export const oneInFlight: Evaluator = (candidate, ctx) => {
  const f = ctx.status.inFlight;
  if (!f?.release || f.release.id === candidate.id) return passed(K.ONE_IN_FLIGHT);
  const phase = f.phase === PromotionPhase.VERIFYING ? "verifying" : "deploying";
  const progress = f.verifications.map((v) => `${v.name} ${v.passes}/${requiredPasses(ctx.spec, v.name)}`).join(", ");
  return pending(K.ONE_IN_FLIGHT, f.release.id, `${f.release.id} is in flight (${phase}${progress ? `: ${progress}` : ""})`);
};
