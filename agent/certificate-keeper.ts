// How the agent proves who it is, and keeping that proof fresh.
//
// At start (chooseCredential): a saved client certificate that is still valid wins; otherwise an
// enrollment token enrolls the host (a new key pair made here, a CSR, EnrollNode); otherwise the
// bearer token. An expired certificate with no enrollment token is an error that says what to do.
//
// While running (CertificateKeeper): at two thirds of the certificate's life, a new key pair and
// CSR go to RenewNodeCertificate over mTLS with the current certificate; the new pair is saved
// and used for later calls (calls under way finish on the old connection). A failed renewal is
// retried with backoff for as long as the current certificate is valid; once it has expired, the
// host must enroll again.
import type { Logger } from "../common/logging/logger.js";
import { ConnectError, Code } from "@connectrpc/connect";
import type { AgentCredential, ControllerClients } from "./controller-client.js";
import { Backoff } from "../common/backoff.js";
import { sleep } from "./engine/sleep.js";
import {
  enrollmentDone,
  enrollmentKeyRequest,
  loadIdentity,
  newKeyRequest,
  renewalTime,
  saveIdentity,
  type NodeIdentity,
} from "./identity.js";

export interface CredentialSettings {
  nodeId: string;
  stateDir: string;
  token: string;
  enrollToken: string;
  /** Shown to admins for a node created by enrollment. */
  displayName?: string;
}

/** The credential to start with, enrolling first when that is what the settings ask for. */
export async function chooseCredential(
  s: CredentialSettings,
  enrollClients: () => ControllerClients,
  log: Logger,
  signal: AbortSignal,
  now: () => Date = () => new Date(),
): Promise<{ credential: AgentCredential; identity?: NodeIdentity }> {
  let identity = await loadIdentity(s.stateDir, s.nodeId);
  if (identity && identity.notAfter <= now()) {
    if (s.enrollToken === "") {
      throw new Error(
        `this node's client certificate expired at ${identity.notAfter.toISOString()}: enroll again with --enroll-token (ask an admin for one)`,
      );
    }
    log.warn(
      { action: "enroll", node_id: s.nodeId, metadata: { expired_at: identity.notAfter.toISOString() } },
      "client certificate expired; enrolling again",
    );
    identity = undefined;
  }
  if (!identity && s.enrollToken !== "") identity = await enroll(s, enrollClients(), log, signal, now);
  if (identity) return { credential: { certPem: identity.certPem, keyPem: identity.keyPem }, identity };
  if (s.token === "") {
    throw new Error("a credential is required: --token/--token-file (a node token), or --enroll-token (an enrollment token)");
  }
  return { credential: { token: s.token } };
}

/** Enrolls this host; retries while the controller cannot be reached, not when it says no. */
async function enroll(
  s: CredentialSettings,
  clients: ControllerClients,
  log: Logger,
  signal: AbortSignal,
  now: () => Date,
): Promise<NodeIdentity> {
  const backoff = new Backoff(500, 30_000);
  // One key for every attempt, kept across restarts: a retry after a lost answer is accepted
  // only with the key the token was used with.
  const request = await enrollmentKeyRequest(s.stateDir, s.nodeId);
  for (;;) {
    try {
      const res = await clients.enrollment.enrollNode({
        enrollmentToken: s.enrollToken,
        nodeId: s.nodeId,
        csrPem: request.csrPem,
        displayName: s.displayName ?? "",
      });
      const identity = await saveIdentity(s.stateDir, s.nodeId, request, res.certificatePem, now());
      await enrollmentDone(s.stateDir);
      log.info(
        { action: "enroll", result: "ok", node_id: s.nodeId, metadata: { not_after: identity.notAfter.toISOString() } },
        "enrolled: calling with the node's client certificate",
      );
      return identity;
    } catch (e) {
      if (!retryable(e) || signal.aborted) throw new Error(`enrollment refused: ${ConnectError.from(e).rawMessage}`, { cause: e });
      const wait = backoff.next();
      log.warn(
        { action: "enroll", result: "error", node_id: s.nodeId, metadata: { message: ConnectError.from(e).rawMessage, retry_in_ms: wait } },
        "enrollment failed; retrying",
      );
      await sleep(wait, signal);
    }
  }
}

/** Renews the node's certificate at two thirds of its life, for as long as the agent runs. */
export class CertificateKeeper {
  // The renewal renewNow started, while it runs.
  private renewing: Promise<void> | undefined;

  constructor(
    private identity: NodeIdentity,
    private readonly deps: { clients: ControllerClients; stateDir: string; log: Logger; now?: () => Date },
  ) {}

  /** The certificate in use. */
  get current(): NodeIdentity {
    return this.identity;
  }

  /** Runs until `signal` aborts or the certificate expires without a renewal. */
  async run(signal: AbortSignal): Promise<void> {
    const now = this.deps.now ?? (() => new Date());
    const backoff = new Backoff(1000, 60_000);
    while (!signal.aborted) {
      const wait = renewalTime(this.identity).getTime() - now().getTime();
      if (wait > 0) {
        await sleep(wait, signal);
        continue;
      }
      if (this.identity.notAfter <= now()) {
        this.deps.log.error(
          {
            action: "certificate_renewal",
            result: "error",
            node_id: this.identity.nodeId,
            metadata: { expired_at: this.identity.notAfter.toISOString() },
          },
          "the client certificate expired before it could be renewed: restart skippy with --enroll-token",
        );
        return;
      }
      try {
        await this.renew(now());
        backoff.reset();
      } catch (e) {
        // Never wait past expiry: the last tries come closer together.
        const left = this.identity.notAfter.getTime() - now().getTime();
        const retryIn = Math.max(100, Math.min(backoff.next(), left / 4));
        this.deps.log.warn(
          {
            action: "certificate_renewal",
            result: "error",
            node_id: this.identity.nodeId,
            metadata: { message: ConnectError.from(e).rawMessage, retry_in_ms: retryIn },
          },
          "certificate renewal failed; retrying",
        );
        await sleep(retryIn, signal);
      }
    }
  }

  /**
   * Renews now, when the controller says the certificate is due (a session's notice); one at a
   * time, a failure logged (the regular schedule still renews it).
   */
  renewNow(): Promise<void> {
    this.renewing ??= this.renew((this.deps.now ?? (() => new Date()))())
      .then(() => undefined)
      .catch((e: unknown) => {
        this.deps.log.warn(
          {
            action: "certificate_renewal",
            result: "error",
            node_id: this.identity.nodeId,
            metadata: { message: ConnectError.from(e).rawMessage },
          },
          "certificate renewal asked for by the controller failed; the regular schedule retries",
        );
      })
      .finally(() => {
        this.renewing = undefined;
      });
    return this.renewing;
  }

  /** One renewal: new key, CSR, signed certificate, saved, used from the next call on. */
  async renew(at: Date): Promise<NodeIdentity> {
    const { nodeId } = this.identity;
    const request = await newKeyRequest(nodeId);
    const res = await this.deps.clients.enrollment.renewNodeCertificate({ nodeId, csrPem: request.csrPem });
    this.identity = await saveIdentity(this.deps.stateDir, nodeId, request, res.certificatePem, at);
    this.deps.clients.useCertificate(this.identity);
    this.deps.log.info(
      { action: "certificate_renewal", result: "ok", node_id: nodeId, metadata: { not_after: this.identity.notAfter.toISOString() } },
      "client certificate renewed",
    );
    return this.identity;
  }
}

function retryable(e: unknown): boolean {
  const code = ConnectError.from(e).code;
  return (
    code === Code.Unavailable || code === Code.DeadlineExceeded || code === Code.Aborted || code === Code.Unknown || code === Code.Internal
  );
}
