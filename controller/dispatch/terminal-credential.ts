// A terminal lives no longer than the credential that opened it: an API key revoked, rotated past
// its grace or expired, a node's credential ended. A notice (auth/credential-ends.ts, relayed from
// the other controllers) asks the store at once; an expiry sends no notice, so the credential is
// also asked again now and then. (The node's own credential ending ends its session, and every
// terminal on it with that: session-terminals.ts.)
import type { Principal } from "../base/context.js";
import { type SkipperError, unauthorized } from "../base/errors.js";
import { credentialHolds } from "../auth/authenticator.js";
import type { CredentialEnds } from "../auth/credential-ends.js";
import type { Store } from "../store/store.js";

/** How often an open terminal's credential is asked again without a notice. */
export const TERMINAL_CREDENTIAL_RECHECK_MS = 60_000;

export interface TerminalCredentialDeps {
  store: Pick<Store, "getLiveNodeCredential" | "getApiKey">;
  credentialEnds: CredentialEnds;
  now: () => Date;
}

/** Calls `ended` (once) when `principal`'s credential no longer holds; returns what stops watching. */
export function watchTerminalCredential(
  deps: TerminalCredentialDeps,
  principal: Principal,
  ended: (why: SkipperError) => void,
  recheckMs = TERMINAL_CREDENTIAL_RECHECK_MS,
): () => void {
  let done = false;
  const check = async () => {
    if (done) return;
    let holds: boolean;
    try {
      holds = await credentialHolds(deps.store, principal, deps.now());
    } catch {
      return; // the store did not answer: asked again at the next notice or round
    }
    if (holds || done) return;
    stop();
    ended(unauthorized("the credential that opened this terminal has ended (revoked, rotated or expired): terminal closed"));
  };
  const unwatch = deps.credentialEnds.watch(principal, () => void check());
  const timer = setInterval(() => void check(), recheckMs);
  timer.unref();
  const stop = () => {
    done = true;
    unwatch();
    clearInterval(timer);
  };
  return stop;
}
