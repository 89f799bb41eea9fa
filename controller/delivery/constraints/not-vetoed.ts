// NOT_VETOED: no version of the candidate is vetoed in this environment (a VETOED decision names
// the version id "<artifact>.<version>").
import { ConstraintKind as K, DecisionKind } from "../../../gen/skipper/v1/delivery_pb.js";
import { byWhom, type Evaluator, failed, passed, versionText } from "./context.js";

export const notVetoed: Evaluator = (candidate, ctx) => {
  for (const d of ctx.status.decisions) {
    if (d.kind !== DecisionKind.VETOED) continue;
    const v = candidate.versions.find((x) => `${x.artifactId}.${x.version}` === d.versionId);
    if (v) return failed(K.NOT_VETOED, d.versionId, `${versionText(v)} vetoed here by ${byWhom(d.by)}`);
  }
  return passed(K.NOT_VETOED);
};
