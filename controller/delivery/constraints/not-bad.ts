// NOT_BAD: none of the candidate's versions is marked bad (anywhere: a mark is the version's own).
import { ConstraintKind as K } from "../../../gen/skipper/v1/delivery_pb.js";
import { byWhom, type Evaluator, failed, passed, versionText } from "./context.js";

export const notBad: Evaluator = (candidate, ctx) => {
  for (const v of candidate.versions) {
    const bad = ctx.versionOf(v.artifactId, v.digest)?.markedBad;
    if (bad) return failed(K.NOT_BAD, `${v.artifactId}.${v.version}`, `${versionText(v)} was marked bad by ${byWhom(bad)}`);
  }
  return passed(K.NOT_BAD);
};
