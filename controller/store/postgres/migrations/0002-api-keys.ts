// API keys: the key as the API shows it (proto JSON) beside the hashes of its secrets.
export const version = 2;
export const name = "api-keys";
export const sql = `
CREATE TABLE api_keys (
  id text COLLATE "C" PRIMARY KEY,
  body jsonb NOT NULL,
  secret_hash text NOT NULL,
  previous_secret_hash text,
  created_at timestamptz NOT NULL
);
`;
