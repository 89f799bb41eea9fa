// APPROVAL: with require_approval, the newest approval or rejection naming the release decides;
// none yet: pending.
import { DecisionKind, ConstraintKind as K } from "../../../gen/skipper/v1/delivery_pb.js";
import { byWhom, type Evaluator, failed, passed, pending } from "./context.js";

export const approval: Evaluator = (candidate, ctx) => {
  if (!ctx.spec.requireApproval) return passed(K.APPROVAL);
  const d = ctx.status.decisions.find(
    (x) => x.releaseId === candidate.id && (x.kind === DecisionKind.APPROVED || x.kind === DecisionKind.REJECTED),
  );
  if (!d) return pending(K.APPROVAL, candidate.id, `waits for approval of ${candidate.id}`);
  if (d.kind === DecisionKind.REJECTED) return failed(K.APPROVAL, candidate.id, `rejected by ${byWhom(d.by)}`);
  return passed(K.APPROVAL, candidate.id);
};
