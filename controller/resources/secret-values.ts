// A secret resource's values: sealed on the way in, never out. Create and update hand their
// `values` (and update its `remove`) to sealSecret, which returns the spec as stored: each value
// sealed under the key ring (its record's name, secret/<id>/<value name>, as associated data),
// `values` emptied, and an entry per value with its version, fingerprint and who set it when.
// What the API shows is publicSecret's copy: neither values nor sealed forms.
import { clone, create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Actor } from "../../gen/skipper/v1/access_pb.js";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { SecretEntrySchema, SecretSpecSchema, type SecretSpec } from "../../gen/skipper/v1/secret_pb.js";
import { invalid } from "../base/errors.js";
import { SECRET_VALUE_NAME } from "../../common/action-rules.js";
import { SecretKeyRing } from "../tls/secret-key-ring.js";

const NAME = SECRET_VALUE_NAME;
const MAX_VALUES = 256;
const MAX_VALUE_BYTES = 64 * 1024;

export interface SealContext {
  ring: SecretKeyRing;
  /** The secret resource's id. */
  id: string;
  actor?: Actor;
  now: Date;
}

/** The spec to store for `incoming` (a create when `before` is undefined, else an update of it). */
export function sealSecret(incoming: SecretSpec, before: SecretSpec | undefined, ctx: SealContext): SecretSpec {
  const field = "desired_state.secret";
  if (Object.keys(incoming.sealed).length > 0 || incoming.entries.length > 0) {
    throw invalid(`${field}.sealed and .entries are the controller's: send values`, { field: `${field}.sealed` });
  }
  if (!before && incoming.remove.length > 0) throw invalid(`${field}.remove is for updates`, { field: `${field}.remove` });
  for (const [name, value] of Object.entries(incoming.values)) {
    if (!NAME.test(name))
      throw invalid(`${field}.values: ${JSON.stringify(name.slice(0, 64))} is not a value name`, { field: `${field}.values` });
    if (Buffer.byteLength(value, "utf8") > MAX_VALUE_BYTES)
      throw invalid(`${field}.values.${name} is over 64 KiB`, { field: `${field}.values` });
  }
  const out = create(SecretSpecSchema, { tenantId: incoming.tenantId, registry: incoming.registry });
  const kept = new Map((before?.entries ?? []).map((e) => [e.name, e]));
  for (const name of incoming.remove) kept.delete(name);
  const names = new Set([...kept.keys(), ...Object.keys(incoming.values)]);
  if (names.size > MAX_VALUES) throw invalid(`a secret holds at most ${MAX_VALUES} values`, { field: `${field}.values` });
  for (const name of [...names].sort()) {
    const context = `secret/${ctx.id}/${name}`;
    const old = kept.get(name);
    const oldSealed = before?.sealed[name];
    const value = incoming.values[name];
    if (value === undefined || (old && oldSealed !== undefined && sameValue(ctx.ring, oldSealed, context, value))) {
      // Unchanged: kept as sealed, with its entry.
      out.sealed[name] = oldSealed!;
      out.entries.push(clone(SecretEntrySchema, old!));
      continue;
    }
    const plain = Buffer.from(value, "utf8");
    const sealed = ctx.ring.seal(plain, context);
    out.sealed[name] = sealed;
    out.entries.push(
      create(SecretEntrySchema, {
        name,
        version: (old?.version ?? 0n) + 1n,
        fingerprint: ctx.ring.fingerprint(plain, context),
        updatedAt: timestampFromDate(ctx.now),
        updatedBy: ctx.actor,
        keyId: SecretKeyRing.keyIdOf(sealed) ?? "",
      }),
    );
  }
  if (out.registry !== "" && !(names.has("username") && names.has("password"))) {
    throw invalid(`${field}: a registry credential holds the values username and password`, { field: `${field}.values` });
  }
  return out;
}

/** The value `name` of a stored secret, opened (for the orders of the nodes that run it). */
export function openSecretValue(ring: SecretKeyRing, secretId: string, spec: SecretSpec, name: string): string | undefined {
  const sealed = spec.sealed[name];
  return sealed === undefined ? undefined : ring.open(sealed, `secret/${secretId}/${name}`).toString("utf8");
}

/** Every value re-sealed with the ring's newest key (after a rotation); undefined when none needed it. */
export function resealSecret(ring: SecretKeyRing, secretId: string, spec: SecretSpec): SecretSpec | undefined {
  const stale = spec.entries.filter((e) => SecretKeyRing.keyIdOf(spec.sealed[e.name] ?? "") !== ring.primaryId);
  if (stale.length === 0) return undefined;
  const out = clone(SecretSpecSchema, spec);
  for (const entry of out.entries) {
    const context = `secret/${secretId}/${entry.name}`;
    const plain = ring.open(spec.sealed[entry.name]!, context);
    out.sealed[entry.name] = ring.seal(plain, context);
    entry.fingerprint = ring.fingerprint(plain, context);
    entry.keyId = ring.primaryId;
  }
  return out;
}

/** `r` as the API shows it: a secret without its values or their sealed forms. */
export function publicSecret(r: Resource): Resource {
  const strip = (s: Resource["desiredState"]) => {
    if (s?.kind.case !== "secret") return;
    s.kind.value.values = {};
    s.kind.value.sealed = {};
  };
  if (r.desiredState?.kind.case !== "secret" && r.lastAppliedState?.kind.case !== "secret") return r;
  const copy = clone(ResourceSchema, r);
  strip(copy.desiredState);
  strip(copy.lastAppliedState);
  return copy;
}

function sameValue(ring: SecretKeyRing, sealed: string, context: string, value: string): boolean {
  try {
    return ring.open(sealed, context).toString("utf8") === value;
  } catch {
    return false;
  }
}
