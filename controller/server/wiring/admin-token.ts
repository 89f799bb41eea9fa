// The admin token is either fixed by configuration or kept (hashed) in the store, where
// RotateAdminToken replaces it; the authenticator reads the store's on every admin call.
import type { Store } from "../../store/store.js";
import { hashToken, mintAdminToken } from "../../auth/tokens.js";
import type { BuildOptions } from "./build-options.js";

export interface AdminToken {
  /** The hash of the configured token; undefined when the store keeps it. */
  fixedAdminHash?: string;
  /** Set only when this start minted a new admin token (none stored, or a reset asked for). */
  generatedAdminToken?: string;
}

/** Settles which admin token holds: the configured one, the stored one, or one minted now. */
export async function settleAdminToken(store: Store, opts: Pick<BuildOptions, "adminToken" | "resetAdminToken">): Promise<AdminToken> {
  let generatedAdminToken: string | undefined;
  const fixedAdminHash = opts.adminToken === undefined ? undefined : hashToken(opts.adminToken);
  if (fixedAdminHash === undefined && (opts.resetAdminToken || !(await store.getAdminCredential()))) {
    generatedAdminToken = mintAdminToken();
    await store.putAdminCredential({ tokenHash: hashToken(generatedAdminToken), createdAt: new Date() });
  }
  return { fixedAdminHash, generatedAdminToken };
}
