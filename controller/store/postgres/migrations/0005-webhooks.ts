// Webhooks: subscriptions (their URL and secret sealed in the body), the deliveries queued for
// them (with the columns the delivery loop and the status ask for), and the dispatcher's cursor.
export const version = 5;
export const name = "webhooks";
export const sql = `
CREATE TABLE webhooks (
  id text COLLATE "C" PRIMARY KEY,
  body jsonb NOT NULL,
  created_at timestamptz NOT NULL
);

CREATE TABLE webhook_deliveries (
  id text COLLATE "C" PRIMARY KEY,
  webhook_id text COLLATE "C" NOT NULL,
  state smallint NOT NULL,
  next_attempt_at timestamptz NOT NULL,
  delivered_at timestamptz,
  last_failure_at timestamptz,
  sort_key text COLLATE "C" NOT NULL,
  body jsonb NOT NULL
);
CREATE INDEX webhook_deliveries_sort ON webhook_deliveries (sort_key);
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, sort_key);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 1;

CREATE TABLE webhook_cursor (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  at timestamptz NOT NULL
);
`;
