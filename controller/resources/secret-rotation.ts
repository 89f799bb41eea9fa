// Rotating the keys that seal secrets: a new key first in the ring, every secret re-sealed with
// it while the old keys still open what they sealed, then the old keys dropped. Re-sealing changes
// no value (versions stay), so nothing is redeployed for it; one event records the rotation.
import { create } from "@bufbuild/protobuf";
import { ResourceSpecSchema } from "../../gen/skipper/v1/resource_pb.js";
import type { Trace } from "../base/context.js";
import { recordEvents } from "../events/event-recorder.js";
import { eachResource } from "../store/each-page.js";
import type { Store } from "../store/store.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import { resealSecret } from "./secret-values.js";

/** What a rotation did. */
export interface Rotation {
  keyId: string;
  resealed: number;
  /** What the other holders of sealed values re-sealed, by name. */
  others: Record<string, number>;
  retired: string[];
}

/** Re-seals what one other holder keeps sealed (webhooks' URLs...) with the ring's newest key; returns how many. */
export type Resealer = () => Promise<number>;

/**
 * Rotates (when the ring is generated here; a ring configured by file is read again) and
 * re-seals every secret, then what each of
 * `others` holds, with the newest key; the old keys go only once all of them are done.
 */
export async function rotateSecretKeys(
  deps: { store: Store; keyRing: SecretKeyRing },
  trace: Trace,
  others: Record<string, Resealer> = {},
): Promise<Rotation> {
  const { store, keyRing } = deps;
  const owned = keyRing.source.kind === "generated";
  // Generated here: a new key. Configured by file: the operator's new first line, read now.
  if (owned) await keyRing.rotate();
  else await keyRing.reload();
  let resealed = 0;
  for await (const secret of eachResource(store, { resourceType: "secret" })) {
    await store.updateResource("secret", secret.id, (cur) => {
      if (cur.desiredState?.kind.case !== "secret") return cur;
      const next = resealSecret(keyRing, cur.id, cur.desiredState.kind.value);
      if (!next) return cur;
      resealed++;
      cur.desiredState = create(ResourceSpecSchema, { kind: { case: "secret", value: next } });
      return cur;
    });
  }
  const counts: Record<string, number> = {};
  for (const [name, reseal] of Object.entries(others)) counts[name] = await reseal();
  // Only once nothing sealed with them is left.
  const retired = owned ? await keyRing.retire() : [];
  await recordEvents(store, [
    { type: "secret_keys_rotated", ...trace, resourceType: "secret", data: { key_id: keyRing.primaryId, resealed, ...counts, retired } },
  ]);
  return { keyId: keyRing.primaryId, resealed, others: counts, retired };
}
