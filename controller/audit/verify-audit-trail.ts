// VerifyAuditTrail: recompute the store's chain from the oldest kept entry to the newest and
// report the first broken link. An edited entry shows as a hash that does not match its content
// (or a line that no longer parses); a removed one as a gap in the numbering at the entry after
// it. What it cannot see alone: entries cut off at the oldest end (indistinguishable from
// retention: compare first_sequence with what retention should have kept) or at the newest end
// (compare the head with an export's signed head kept elsewhere). See docs/audit.md.
import type { Store } from "../store/store.js";
import { AuditChainCheck, type AuditChainSummary } from "./audit-chain-check.js";

/** Walks every kept entry of `store`'s audit trail and reports whether the chain holds. */
export async function verifyAuditTrail(store: Pick<Store, "scanAuditEntries">): Promise<AuditChainSummary> {
  const check = new AuditChainCheck();
  for await (const { location, text } of store.scanAuditEntries()) check.add(location, text);
  return check.summary();
}
