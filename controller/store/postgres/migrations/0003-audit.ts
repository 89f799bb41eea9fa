// Schema version 3 of the PostgreSQL store: the audit trail (see ../pg-store.ts, "Audit trail",
// and docs/audit.md). Each row keeps the entry's text exactly as audit-chain.ts made it: a text
// column, not jsonb, which would normalise it, so that an edit of any character is found by
// verification. `day` is the UTC day of the entry's time (retention drops whole days);
// `recorded_at` is that time, for listings by time range.
export const version = 3;
export const name = "audit";

export const sql = `
CREATE TABLE audit_entries (
  sequence bigint PRIMARY KEY CHECK (sequence > 0),
  day date NOT NULL,
  recorded_at timestamptz NOT NULL,
  text text NOT NULL
);
CREATE INDEX audit_entries_day ON audit_entries (day);
CREATE INDEX audit_entries_recorded_at ON audit_entries (recorded_at);
`;
