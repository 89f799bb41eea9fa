// A spec's image lock, as the controller keeps it: the digests the first node that applied the
// spec resolved its image references to (its result's image_lock, recorded on its target as
// TargetStatus.image_digests). Every later order of that spec carries it (WorkOrderDesiredState
// .image_lock), so every node runs the same images or refuses (DIGEST_MISMATCH) before `up`. No
// record of its own: the lock lives as long as a node runs the spec; a spec no node runs any more
// is resolved afresh (and a node's own restore of it uses the lock it recorded itself).
import { create } from "@bufbuild/protobuf";
import type { TargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import { ImageLockSchema, type ImageLock } from "../../gen/skipper/v1/work_order_pb.js";

/** Spec hash -> its lock, when a node runs the spec and reported its digests. */
export type LockLookup = (specHash: string) => ImageLock | undefined;

/** The lock of each spec the `records` show applied: the node first by id that reported one. */
export function imageLocks(records: Iterable<TargetStatus>): LockLookup {
  const bySpec = new Map<string, Record<string, string>>();
  for (const r of [...records].sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0))) {
    if (r.appliedHash === "" || bySpec.has(r.appliedHash) || Object.keys(r.imageDigests).length === 0) continue;
    bySpec.set(r.appliedHash, r.imageDigests);
  }
  return (specHash) => {
    const digests = bySpec.get(specHash);
    return digests ? create(ImageLockSchema, { specHash, digests: { ...digests } }) : undefined;
  };
}

// What a node may report as its lock: image references (no whitespace, at most 512 bytes) to
// sha256 digests, at most 128 of them. A node's report becomes every other node's lock, so a
// faulty one must not hand the fleet garbage to refuse on (or to pass to `docker image inspect`).
const REFERENCE = /^[^\s]{1,512}$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;
const MAX_ENTRIES = 128;

/** The entries of a node's reported image lock that are a reference and a sha256 digest; none when there are too many. */
export function reportedImageLock(reported: Record<string, string> | undefined): Record<string, string> {
  const entries = Object.entries(reported ?? {});
  if (entries.length > MAX_ENTRIES) return {};
  return Object.fromEntries(entries.filter(([ref, digest]) => REFERENCE.test(ref) && DIGEST.test(digest)));
}
