// The controller's own attempts (subscriptions without a node_selector): the POST both senders
// share (common/webhook-post.ts), with what the controller keeps of an answer.
import { postWebhook, type AttemptOutcome } from "../../common/webhook-post.js";

export type { AttemptOutcome } from "../../common/webhook-post.js";

export interface SendRequest {
  url: URL;
  body: string;
  headers: Record<string, string>;
  /** PEM of the CA that signs the receiver's certificate; public CAs otherwise. */
  caPem?: string;
  timeoutMs: number;
  /** Aborts the attempt (the controller stops): it counts as no answer. */
  signal?: AbortSignal;
  /** May connect to non-public addresses (else such a URL or a host resolving to one is refused unsent). */
  allowPrivateNetwork?: boolean;
}

/** POSTs `body` to `url`; resolves with the outcome, never rejects. */
export function send(req: SendRequest): Promise<AttemptOutcome> {
  return postWebhook({ ...req, stoppedText: "the controller stopped during the attempt", keepBytes: 512 });
}
