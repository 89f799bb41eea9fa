// The PostgreSQL store's credentials: node credentials, the admin token's hash, API keys and
// enrollment tokens, a table each (hashes only).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { ApiKeySchema } from "../../../gen/skipper/v1/access_pb.js";
import { EnrollmentTokenSchema } from "../../../gen/skipper/v1/enrollment_service_pb.js";
import { decodeNodeCertificate, encodeNodeCertificate } from "../record-codec.js";
import type * as S from "../store.js";
import { checkId } from "../../base/id-checks.js";
import { bodyOf, messageOf } from "./pg-records.js";
import type { PgDatabase } from "./pg-database.js";

interface ApiKeyRow {
  body: unknown;
  secret_hash: string;
  previous_secret_hash: string | null;
}

function apiKeyOf(row: ApiKeyRow): S.ApiKeyRecord {
  return {
    key: messageOf(ApiKeySchema, row.body),
    secretHash: row.secret_hash,
    ...(row.previous_secret_hash === null ? {} : { previousSecretHash: row.previous_secret_hash }),
  };
}

interface CredentialRow {
  token_hash: string;
  created_at: Date;
  certificates: unknown[] | null;
}

function credentialOf(nodeId: string, row: CredentialRow): S.NodeCredential {
  return {
    nodeId,
    tokenHash: row.token_hash,
    createdAt: row.created_at,
    ...(row.certificates === null ? {} : { certificates: row.certificates.map(decodeNodeCertificate) }),
  };
}

/** The CredentialStore facet of the PostgreSQL store. */
export class PgCredentials implements S.CredentialStore {
  constructor(private readonly db: PgDatabase) {}

  async getNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    const { rows } = await this.db.query<CredentialRow>(
      "SELECT token_hash, created_at, certificates FROM node_credentials WHERE node_id = $1",
      [nodeId],
    );
    return rows[0] && credentialOf(nodeId, rows[0]);
  }

  async getLiveNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    const { rows } = await this.db.query<CredentialRow>(
      `SELECT token_hash, created_at, certificates FROM node_credentials WHERE node_id = $1
       AND EXISTS (SELECT 1 FROM resources WHERE resource_type = 'node' AND id = $1 AND NOT deleted)`,
      [nodeId],
    );
    return rows[0] && credentialOf(nodeId, rows[0]);
  }

  async putNodeCredential(credential: S.NodeCredential): Promise<void> {
    checkId(credential.nodeId, "node_id");
    const certificates = credential.certificates === undefined ? null : JSON.stringify(credential.certificates.map(encodeNodeCertificate));
    await this.db.query(
      `INSERT INTO node_credentials (node_id, token_hash, created_at, certificates) VALUES ($1, $2, $3, $4)
       ON CONFLICT (node_id) DO UPDATE SET token_hash = $2, created_at = $3, certificates = $4`,
      [credential.nodeId, credential.tokenHash, credential.createdAt, certificates],
    );
  }

  async getAdminCredential(): Promise<S.AdminCredential | undefined> {
    const { rows } = await this.db.query<{ token_hash: string; created_at: Date }>("SELECT token_hash, created_at FROM admin_credential");
    return rows[0] && { tokenHash: rows[0].token_hash, createdAt: rows[0].created_at };
  }

  async putAdminCredential(credential: S.AdminCredential): Promise<void> {
    await this.db.query(
      `INSERT INTO admin_credential (token_hash, created_at) VALUES ($1, $2)
       ON CONFLICT (singleton) DO UPDATE SET token_hash = $1, created_at = $2`,
      [credential.tokenHash, credential.createdAt],
    );
  }

  async getApiKey(id: string): Promise<S.ApiKeyRecord | undefined> {
    const { rows } = await this.db.query<ApiKeyRow>("SELECT body, secret_hash, previous_secret_hash FROM api_keys WHERE id = $1", [id]);
    return rows[0] && apiKeyOf(rows[0]);
  }

  async putApiKey(record: S.ApiKeyRecord): Promise<void> {
    checkId(record.key.id, "id");
    await this.db.query(
      `INSERT INTO api_keys (id, body, secret_hash, previous_secret_hash, created_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (id) DO UPDATE SET body = $2, secret_hash = $3, previous_secret_hash = $4`,
      [
        record.key.id,
        bodyOf(ApiKeySchema, record.key),
        record.secretHash,
        record.previousSecretHash ?? null,
        record.key.createdAt ? timestampDate(record.key.createdAt) : new Date(0),
      ],
    );
  }

  async listApiKeys(): Promise<S.ApiKeyRecord[]> {
    const { rows } = await this.db.query<ApiKeyRow>("SELECT body, secret_hash, previous_secret_hash FROM api_keys ORDER BY created_at, id");
    return rows.map(apiKeyOf);
  }

  async getEnrollmentToken(id: string): Promise<S.EnrollmentTokenRecord | undefined> {
    const { rows } = await this.db.query<{ body: unknown; secret_hash: string }>(
      "SELECT body, secret_hash FROM enrollment_tokens WHERE id = $1",
      [id],
    );
    return rows[0] && { token: messageOf(EnrollmentTokenSchema, rows[0].body), secretHash: rows[0].secret_hash };
  }

  async putEnrollmentToken(record: S.EnrollmentTokenRecord): Promise<void> {
    checkId(record.token.id, "id");
    await this.db.query(
      `INSERT INTO enrollment_tokens (id, body, secret_hash, created_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (id) DO UPDATE SET body = $2, secret_hash = $3`,
      [
        record.token.id,
        bodyOf(EnrollmentTokenSchema, record.token),
        record.secretHash,
        record.token.createdAt ? timestampDate(record.token.createdAt) : new Date(0),
      ],
    );
  }

  async listEnrollmentTokens(): Promise<S.EnrollmentTokenRecord[]> {
    const { rows } = await this.db.query<{ body: unknown; secret_hash: string }>(
      "SELECT body, secret_hash FROM enrollment_tokens ORDER BY created_at, id",
    );
    return rows.map((r) => ({ token: messageOf(EnrollmentTokenSchema, r.body), secretHash: r.secret_hash }));
  }
}
