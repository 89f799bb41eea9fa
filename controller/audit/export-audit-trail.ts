// ExportAuditTrail: the entries of a time range as JSON lines, each exactly as the store keeps it
// (canonical proto JSON, audit-chain.ts), and the last one's hash signed by the controller's key.
// The head hash covers every entry of the export through the previous_hash links, so the
// signature vouches for all of them (verify-audit-export.ts checks one, docs/audit.md says how
// with openssl).
import type { Store } from "../store/store.js";
import { auditText } from "../store/audit-chain.js";
import { invalid } from "../base/errors.js";
import type { AuditSigner } from "./audit-signer.js";

/** An export holds at most this many entries (a response is built in memory): ask for a shorter range. */
export const MAX_EXPORT_ENTRIES = 100_000;

/** An export: the entries and the signed hash of the last one. */
export interface AuditExport {
  /** One entry per line, oldest first, each line ending in a newline. */
  entriesJsonl: Buffer;
  entryCount: number;
  /** Hash of the last entry, its signature (base64) and the certificate that checks it ("" for both hash and signature when the range is empty). */
  headHash: string;
  headSignature: string;
  signerCertificate: string;
}

/** Exports the entries whose time is in [since, until) (either open), signed by `signer`. */
export async function exportAuditTrail(
  store: Pick<Store, "listAuditEntries">,
  since: Date | undefined,
  until: Date | undefined,
  signer: AuditSigner,
): Promise<AuditExport> {
  const lines: string[] = [];
  let headHash = "";
  let pageToken = "";
  do {
    const page = await store.listAuditEntries({ since, until, pageSize: 1000, pageToken });
    for (const entry of page.items) {
      lines.push(`${auditText(entry)}\n`);
      headHash = entry.hash;
    }
    if (lines.length > MAX_EXPORT_ENTRIES) {
      throw invalid(`the range holds more than ${MAX_EXPORT_ENTRIES} audit entries: export a shorter one`, { field: "until" });
    }
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return {
    entriesJsonl: Buffer.from(lines.join(""), "utf8"),
    entryCount: lines.length,
    headHash,
    headSignature: headHash === "" ? "" : signer.sign(Buffer.from(headHash, "utf8")),
    signerCertificate: signer.certificatePem,
  };
}
