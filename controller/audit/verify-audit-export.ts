// Checks an export (export-audit-trail.ts) as a client would: every line an entry whose hash
// matches its content, each linked to the one before, the last one's hash the signed head, and
// the signature good for the certificate. Which certificate to trust is the client's to decide:
// pass the controller's own (or check the export's against the controller's CA first).
import { AuditChainCheck, type AuditBreak } from "./audit-chain-check.js";
import { verifyAuditSignature } from "./audit-signer.js";

/** An export as received (the response's fields). */
export interface ReceivedAuditExport {
  entriesJsonl: Uint8Array;
  headHash: string;
  headSignature: string;
  signerCertificate: string;
}

/** What checking an export found: `reason` says what is wrong when it is not valid. */
export interface AuditExportCheck {
  valid: boolean;
  entries: number;
  reason?: string;
  /** The first line that does not check, with its line number as location ("line 3"). */
  firstBreak?: AuditBreak;
}

/** Checks `exp`'s chain and its head's signature with `certificatePem` (default: the export's own). */
export function verifyAuditExport(exp: ReceivedAuditExport, certificatePem = exp.signerCertificate): AuditExportCheck {
  const text = Buffer.from(exp.entriesJsonl).toString("utf8");
  const lines = text === "" ? [] : text.split("\n");
  if (lines.length > 0 && lines.pop() !== "") return { valid: false, entries: 0, reason: "the last line does not end in a newline" };
  const check = new AuditChainCheck();
  lines.forEach((line, i) => check.add(`line ${i + 1}`, line));
  const found = check.summary();
  const fail = (reason: string): AuditExportCheck => ({ valid: false, entries: found.entriesChecked, reason });
  if (found.firstBreak) {
    return { ...fail(`${found.firstBreak.location}: ${found.firstBreak.reason}`), firstBreak: found.firstBreak };
  }
  if (found.headHash !== exp.headHash) return fail("head_hash is not the last entry's hash");
  if (exp.headHash === "") return { valid: true, entries: 0 };
  if (!verifyAuditSignature(Buffer.from(exp.headHash, "utf8"), exp.headSignature, certificatePem)) {
    return fail("head_signature does not verify with the certificate");
  }
  return { valid: true, entries: found.entriesChecked };
}
