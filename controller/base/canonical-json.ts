// Canonical JSON: object keys sorted at every level, so the same content always gives the same
// text (protobuf maps have no order). Used wherever a fingerprint of a message must not depend on
// the order its map entries came in: idempotency keys' request hashes, the safety settings a
// rolled-back deploy carried.
import { createHash } from "node:crypto";
import { toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";

export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v);
}

export function sha256(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}

/** sha256 of a message's canonical proto JSON; "" for no message. */
export function fingerprint<D extends DescMessage>(schema: D, msg: MessageShape<D> | undefined): string {
  return msg === undefined ? "" : sha256(canonicalJson(toJson(schema, msg)));
}
