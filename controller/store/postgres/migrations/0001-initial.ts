// Schema version 1 of the PostgreSQL store. A migration is never edited once released: a change
// is a new file with the next version, listed in ../migrations.ts.
//
// Each record keeps its contract message as JSONB (`body`, proto JSON with proto field names, as
// the file store writes it), beside the columns that listings filter and sort on. Sort keys are
// the file store's keys with a space where it puts a NUL (text cannot hold one); they are compared
// under the C collation, so order is byte order whatever the database's locale.
export const version = 1;
export const name = "initial";

export const sql = `
-- Resource versions (see pg-store.ts, "Revisions").
CREATE SEQUENCE store_revision AS bigint MINVALUE 1 START 1;

CREATE TABLE resources (
  resource_type text COLLATE "C" NOT NULL,
  id text COLLATE "C" NOT NULL,
  sort_key text COLLATE "C" NOT NULL,
  version bigint NOT NULL,
  deleted boolean NOT NULL,
  tenant_id text COLLATE "C",
  labels jsonb NOT NULL,
  phase integer,
  finished_at timestamptz,
  body jsonb NOT NULL,
  PRIMARY KEY (resource_type, id)
);
CREATE UNIQUE INDEX resources_sort ON resources (sort_key);
CREATE INDEX resources_tenant ON resources (tenant_id, sort_key) WHERE tenant_id IS NOT NULL;
CREATE INDEX resources_version ON resources (version);
CREATE INDEX resources_phase ON resources (phase) WHERE phase IS NOT NULL;

CREATE TABLE work_orders (
  id text COLLATE "C" PRIMARY KEY,
  sort_key text COLLATE "C" NOT NULL,
  status integer NOT NULL,
  node_id text COLLATE "C" NOT NULL,
  tenant_id text COLLATE "C" NOT NULL,
  priority integer NOT NULL,
  expires_at timestamptz,
  finished_at timestamptz,
  body jsonb NOT NULL
);
CREATE UNIQUE INDEX work_orders_sort ON work_orders (sort_key);
CREATE INDEX work_orders_status ON work_orders (status, sort_key);
CREATE INDEX work_orders_tenant ON work_orders (tenant_id, sort_key);
CREATE INDEX work_orders_pending ON work_orders (node_id, priority DESC, sort_key) WHERE status = 1;
CREATE INDEX work_orders_finished ON work_orders (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE events (
  day date NOT NULL,
  id text COLLATE "C" NOT NULL,
  sort_key text COLLATE "C" NOT NULL,
  type text NOT NULL,
  tenant_id text COLLATE "C" NOT NULL,
  resource_id text COLLATE "C" NOT NULL,
  work_order_id text COLLATE "C" NOT NULL,
  correlation_id text COLLATE "C" NOT NULL,
  revision bigint NOT NULL,
  body jsonb NOT NULL,
  PRIMARY KEY (day, id)
);
CREATE INDEX events_sort ON events (sort_key);
CREATE INDEX events_tenant ON events (tenant_id, sort_key);
CREATE INDEX events_resource ON events (resource_id, sort_key);
CREATE INDEX events_work_order ON events (work_order_id, sort_key);
CREATE INDEX events_correlation ON events (correlation_id, sort_key);

CREATE TABLE snapshots (
  slot text COLLATE "C" PRIMARY KEY,
  body jsonb NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE idempotency_records (
  key text COLLATE "C" PRIMARY KEY,
  request_hash text NOT NULL,
  response json NOT NULL,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);

CREATE TABLE node_credentials (
  node_id text COLLATE "C" PRIMARY KEY,
  token_hash text NOT NULL,
  created_at timestamptz NOT NULL
);

CREATE TABLE admin_credential (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  token_hash text NOT NULL,
  created_at timestamptz NOT NULL
);
`;
