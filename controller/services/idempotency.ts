// x-idempotency-key for mutating RPCs that create something (Apply, CreateWorkOrder, RegisterNode): a retry
// with the same key and body replays the first response and creates nothing; the same key with
// another body is a CONFLICT. Keys are scoped to the method and the caller's kind, and only a
// hash of the key is stored; records expire after a day. A replayed response carries no secret
// values (they are stored redacted).
import { fromJson, toJson, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { canonicalJson as canonical, sha256 } from "../base/canonical-json.js";
import type { CallInfo } from "../base/context.js";
import { conflict } from "../base/errors.js";
import type { ServiceDeps } from "./deps.js";
import { redact } from "../../common/logging/redact.js";

const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

/**
 * Runs `create` once per idempotency key (when the call carries one). A retry gets the stored
 * response, or, with `replay`, what `replay` makes of it: for a response whose secret the store
 * must not keep (a node's new token), the retry is answered with a fresh one instead.
 */
export async function idempotent<Req extends DescMessage, Res extends DescMessage>(
  deps: Pick<ServiceDeps, "store" | "locks" | "now" | "metrics">,
  call: CallInfo,
  method: string,
  schemas: { request: Req; response: Res },
  req: MessageShape<Req>,
  create: () => Promise<MessageShape<Res>>,
  replay?: (stored: MessageShape<Res>) => Promise<MessageShape<Res>>,
): Promise<MessageShape<Res>> {
  const key = call.idempotencyKey;
  if (key === undefined) return create();
  // Keys are the caller's own: one API key cannot replay (or collide with) another's responses.
  const scoped = sha256(`${method}\0${callerOf(call)}\0${key}`);
  const requestHash = sha256(canonical(toJson(schemas.request, req)));
  return deps.locks.run(`idem:${scoped}`, async () => {
    const now = deps.now();
    const prior = await deps.store.getIdempotencyRecord(scoped, now);
    if (prior) {
      // "DeploymentService/Apply" -> "Apply": the method names a fixed few calls.
      const hit = (result: "replayed" | "conflict") => deps.metrics.idempotencyHit(method.slice(method.indexOf("/") + 1), result);
      if (prior.requestHash !== requestHash) {
        hit("conflict");
        throw conflict("x-idempotency-key was already used with a different request body", { field: "x-idempotency-key" });
      }
      hit("replayed");
      const stored = fromJson(schemas.response, prior.response as never, { ignoreUnknownFields: true });
      return replay ? replay(stored) : stored;
    }
    const res = await create();
    await deps.store.putIdempotencyRecord({
      key: scoped,
      requestHash,
      // Stored without secret values (a replay shows them as [REDACTED]): the caller sent them
      // and still has them, and a record kept for a day is no place for another copy.
      response: redact(toJson(schemas.response, res, { useProtoFieldName: true })),
      createdAt: now,
      expiresAt: new Date(now.getTime() + IDEMPOTENCY_TTL_MS),
    });
    return res;
  });
}

/** Who a key belongs to: "admin", "node" (as before API keys) or "api_key/<id>". */
function callerOf(call: CallInfo): string {
  const p = call.principal;
  return p.kind === "api_key" ? `api_key/${p.keyId}` : p.kind;
}
