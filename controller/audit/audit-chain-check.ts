// Checks stored audit entries one after another as a chain (audit-chain.ts): each line on its own
// (it parses, it is in canonical form, its hash matches its content) and against the entry
// before it (the next sequence number, the previous entry's hash). The first entry seen is not
// checked against anything: retention may have dropped those before it. Used on a store's trail
// (verify-audit-trail.ts) and on an export (verify-audit-export.ts).
import type { JsonObject } from "@bufbuild/protobuf";
import type { AuditEntry } from "../../gen/skipper/v1/audit_service_pb.js";
import { canonicalJson } from "../base/canonical-json.js";
import { auditHash, readAuditLine } from "../store/audit-chain.js";

/** Where a chain breaks: the entry (0 when the line is not one), where it is stored, what is wrong. */
export interface AuditBreak {
  sequence: bigint;
  location: string;
  reason: string;
}

/** What a walk over a chain found. */
export interface AuditChainSummary {
  /** True when every line checked. */
  intact: boolean;
  /** Lines that are entries. */
  entriesChecked: number;
  /** Sequence numbers of the first and the last entry (0 when none). */
  firstSequence: bigint;
  lastSequence: bigint;
  /** Hash of the last entry ("" when none). */
  headHash: string;
  firstBreak?: AuditBreak;
}

/** A chain being walked line by line; keeps the first break and goes on counting. */
export class AuditChainCheck {
  private entries = 0;
  private first: AuditEntry | undefined;
  private last: AuditEntry | undefined;
  private firstBreak: AuditBreak | undefined;

  /** Checks the next stored line; returns what is wrong with it, if anything. */
  add(location: string, text: string): AuditBreak | undefined {
    const line = readAuditLine(text);
    if (!line.ok) return this.broken({ sequence: line.sequence, location, reason: line.reason });
    const { entry, json } = line;
    const previous = this.last;
    this.entries++;
    this.first ??= entry;
    this.last = entry;
    const reason = problemOf(entry, json, text, previous);
    return reason === undefined ? undefined : this.broken({ sequence: entry.sequence, location, reason });
  }

  /** What the walk found so far. */
  summary(): AuditChainSummary {
    return {
      intact: this.firstBreak === undefined,
      entriesChecked: this.entries,
      firstSequence: this.first?.sequence ?? 0n,
      lastSequence: this.last?.sequence ?? 0n,
      headHash: this.last?.hash ?? "",
      ...(this.firstBreak ? { firstBreak: this.firstBreak } : {}),
    };
  }

  private broken(b: AuditBreak): AuditBreak {
    this.firstBreak ??= b;
    return b;
  }
}

// What is wrong with one parsed entry that follows `previous` (undefined: the first one seen).
function problemOf(entry: AuditEntry, json: JsonObject, text: string, previous: AuditEntry | undefined): string | undefined {
  if (auditHash(json) !== entry.hash) return "hash does not match its content";
  // Same content, other bytes (spaces, key order): still an edit of what was stored.
  if (canonicalJson(json) !== text) return "line is not in canonical form";
  if (!previous) return entry.sequence === 1n && entry.previousHash !== "" ? "entry 1 has a previous_hash" : undefined;
  const expected = previous.sequence + 1n;
  if (entry.sequence > expected) {
    const last = entry.sequence - 1n;
    return last === expected ? `entry ${expected} is missing` : `entries ${expected}-${last} are missing`;
  }
  if (entry.sequence < expected) return `sequence ${entry.sequence} does not follow entry ${previous.sequence}`;
  if (entry.previousHash !== previous.hash) return `previous_hash does not match entry ${previous.sequence}`;
  return undefined;
}
