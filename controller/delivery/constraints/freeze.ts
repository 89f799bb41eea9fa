// FREEZE: a freeze of a tenant of the environment, or of every tenant, stops promotion until it
// ends. Freezes by node selector keep acting on rollouts only.
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { ConstraintKind as K } from "../../../gen/skipper/v1/delivery_pb.js";
import { type Evaluator, passed, pending, when } from "./context.js";

export const freeze: Evaluator = (_candidate, ctx) => {
  for (const f of ctx.observed.freezes) {
    if (Object.keys(f.spec.nodeSelector).length > 0) continue;
    const endsAt = f.spec.endsAt ? timestampMs(f.spec.endsAt) : 0;
    if (endsAt <= ctx.now) continue;
    const tenant = f.spec.tenantId;
    if (tenant !== "" && !ctx.observed.tenants.some((t) => t.id === tenant)) continue;
    const of = tenant === "" ? "every tenant" : `tenant ${tenant}`;
    const why = f.spec.reason ? ` (${f.spec.reason})` : "";
    return pending(K.FREEZE, f.id, `freeze ${f.id} of ${of} until ${when(endsAt)}${why}`, endsAt);
  }
  return passed(K.FREEZE);
};
