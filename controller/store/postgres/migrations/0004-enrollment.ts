// Node enrollment: the client certificates a node holds (serial and expiry, what the
// authenticator checks a presented certificate against), and enrollment tokens.
export const version = 4;
export const name = "enrollment";
export const sql = `
ALTER TABLE node_credentials ADD COLUMN certificates jsonb;

CREATE TABLE enrollment_tokens (
  id text COLLATE "C" PRIMARY KEY,
  body jsonb NOT NULL,
  secret_hash text NOT NULL,
  created_at timestamptz NOT NULL
);
`;
