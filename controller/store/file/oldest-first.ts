// The order the file store lists its small credential-like records in (API keys, enrollment
// tokens, webhooks): oldest first by creation time, ids breaking ties — what PostgreSQL's
// ORDER BY created_at, id gives the same records.
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";

/** A comparator of records by the creation time and id `of` picks from each, oldest first. */
export function oldestFirst<T>(of: (r: T) => { createdAt?: Timestamp; id: string }): (a: T, b: T) => number {
  return (a, b) => {
    const x = of(a);
    const y = of(b);
    const at = (m: { createdAt?: Timestamp }) => (m.createdAt ? timestampMs(m.createdAt) : 0);
    return at(x) - at(y) || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0);
  };
}
