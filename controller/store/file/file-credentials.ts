// The file store's credentials under auth/: node credentials, the generated admin token's hash,
// API keys and enrollment tokens (hashes only), held in memory from open. What a read returns is
// a copy the caller may change.
import { copyMessage } from "../../../common/message-copy.js";
import { ApiKeySchema } from "../../../gen/skipper/v1/access_pb.js";
import { EnrollmentTokenSchema } from "../../../gen/skipper/v1/enrollment_service_pb.js";
import * as codec from "../record-codec.js";
import type * as S from "../store.js";
import type { FileCore } from "./file-core.js";
import type { LoadedData } from "./load-data-dir.js";
import { oldestFirst } from "./oldest-first.js";

/** The CredentialStore facet of the file store. */
export class FileCredentials implements S.CredentialStore {
  private nodeCredentials = new Map<string, S.NodeCredential>();
  private admin: S.AdminCredential | undefined;
  private apiKeys = new Map<string, S.ApiKeyRecord>();
  private enrollmentTokens = new Map<string, S.EnrollmentTokenRecord>();

  /** `nodeLive(id)`: whether node `id` is stored and not deleted (getLiveNodeCredential asks). */
  constructor(
    private readonly core: FileCore,
    private readonly nodeLive: (nodeId: string) => boolean,
  ) {}

  /** The credentials read at open. */
  load(data: Pick<LoadedData, "nodeCredentials" | "adminCredential" | "apiKeys" | "enrollmentTokens">): void {
    this.nodeCredentials = new Map(data.nodeCredentials.map((c) => [c.nodeId, c]));
    this.admin = data.adminCredential;
    this.apiKeys = new Map(data.apiKeys.map((r) => [r.key.id, r]));
    this.enrollmentTokens = new Map(data.enrollmentTokens.map((r) => [r.token.id, r]));
  }

  async getNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    this.core.ensureOpen();
    const c = this.nodeCredentials.get(nodeId);
    return c && copyCredential(c);
  }

  async getLiveNodeCredential(nodeId: string): Promise<S.NodeCredential | undefined> {
    this.core.ensureOpen();
    return this.nodeLive(nodeId) ? this.getNodeCredential(nodeId) : undefined;
  }

  async putNodeCredential(credential: S.NodeCredential): Promise<void> {
    const path = this.core.paths.nodeCredential(credential.nodeId);
    const stored = copyCredential(credential);
    await this.core.write(`node-credential/${stored.nodeId}`, async () => {
      await this.core.fs.writeFile(path, codec.encodeNodeCredential(stored));
      this.nodeCredentials.set(stored.nodeId, stored);
    });
  }

  async getAdminCredential(): Promise<S.AdminCredential | undefined> {
    this.core.ensureOpen();
    return this.admin && { ...this.admin, createdAt: new Date(this.admin.createdAt) };
  }

  async putAdminCredential(credential: S.AdminCredential): Promise<void> {
    const stored = { tokenHash: credential.tokenHash, createdAt: new Date(credential.createdAt) };
    await this.core.write("admin-credential", async () => {
      await this.core.fs.writeFile(this.core.paths.adminCredential(), codec.encodeAdminCredential(stored));
      this.admin = stored;
    });
  }

  async getApiKey(id: string): Promise<S.ApiKeyRecord | undefined> {
    this.core.ensureOpen();
    const r = this.apiKeys.get(id);
    return r && copyApiKey(r);
  }

  async putApiKey(record: S.ApiKeyRecord): Promise<void> {
    const path = this.core.paths.apiKey(record.key.id);
    const stored = copyApiKey(record);
    await this.core.write(`api-key/${stored.key.id}`, async () => {
      await this.core.fs.writeFile(path, codec.encodeApiKey(stored));
      this.apiKeys.set(stored.key.id, stored);
    });
  }

  async listApiKeys(): Promise<S.ApiKeyRecord[]> {
    this.core.ensureOpen();
    return [...this.apiKeys.values()].map(copyApiKey).sort(oldestFirst((r) => r.key));
  }

  async getEnrollmentToken(id: string): Promise<S.EnrollmentTokenRecord | undefined> {
    this.core.ensureOpen();
    const r = this.enrollmentTokens.get(id);
    return r && copyEnrollmentToken(r);
  }

  async putEnrollmentToken(record: S.EnrollmentTokenRecord): Promise<void> {
    const path = this.core.paths.enrollmentToken(record.token.id);
    const stored = copyEnrollmentToken(record);
    await this.core.write(`enrollment-token/${stored.token.id}`, async () => {
      await this.core.fs.writeFile(path, codec.encodeEnrollmentToken(stored));
      this.enrollmentTokens.set(stored.token.id, stored);
    });
  }

  async listEnrollmentTokens(): Promise<S.EnrollmentTokenRecord[]> {
    this.core.ensureOpen();
    return [...this.enrollmentTokens.values()].map(copyEnrollmentToken).sort(oldestFirst((r) => r.token));
  }
}

/** A copy the caller may change without changing what the store holds. */
function copyApiKey(r: S.ApiKeyRecord): S.ApiKeyRecord {
  return { ...r, key: copyMessage(ApiKeySchema, r.key) };
}

function copyCredential(c: S.NodeCredential): S.NodeCredential {
  return {
    nodeId: c.nodeId,
    tokenHash: c.tokenHash,
    createdAt: new Date(c.createdAt),
    ...(c.certificates ? { certificates: c.certificates.map((x) => ({ ...x, notAfter: new Date(x.notAfter) })) } : {}),
  };
}

function copyEnrollmentToken(r: S.EnrollmentTokenRecord): S.EnrollmentTokenRecord {
  return { token: copyMessage(EnrollmentTokenSchema, r.token), secretHash: r.secretHash };
}
