// Data directories as the file store wrote them before its resource directories took the design's
// plural names (layout 1: resources/<resource_type>/<id>.json), for the tests of the move.
import { create } from "@bufbuild/protobuf";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { RESOURCE_KINDS, RESOURCE_TYPES, type ResourceType } from "../../common/resource-kinds.js";
import { ResourceSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { encodeMessage } from "../../controller/store/record-codec.js";

/**
 * Each type's directory under resources/ now: for the types layout 1 had, the seed's names and
 * ours for those it does not name, written out here as the oracle; a type added since has no
 * layout-1 past, and its directory is its kind's.
 */
export const PLURAL_DIRS: Record<ResourceType, string> = {
  ...(Object.fromEntries(RESOURCE_TYPES.map((t) => [t, RESOURCE_KINDS[t].dir])) as Record<ResourceType, string>),
  tenant: "tenants",
  node: "nodes",
  service: "services",
  deployment: "deployments",
  resource_limits: "resource-limits",
  network: "networks",
  volume: "volumes",
  rollout: "rollouts",
  freeze: "freezes",
  secret: "secrets",
};

/**
 * A resource of `type` with resource_version `version`, as a store of either layout writes it; its
 * label `written` says which write it is, should a controller update its status since.
 */
export function resource(type: ResourceType, id: string, version: number): Resource {
  return create(ResourceSchema, {
    id,
    resourceType: type,
    schemaVersion: "v1",
    metadata: { resourceVersion: String(version), labels: { written: `${id}-v${version}` } },
  });
}

/** `perType` resources of every type (<type>-0, <type>-1, ...), with distinct versions. */
export function everyType(perType = 2): Resource[] {
  return RESOURCE_TYPES.flatMap((type, t) =>
    Array.from({ length: perType }, (_, i) => resource(type, `${type}-${i}`, t * perType + i + 1)),
  );
}

/**
 * Writes a data directory as the layout-1 store left it: the directories its open made (each
 * type's under the type's own name, private like the store's), and each of `resources` at
 * resources/<type>/<id>.json.
 */
export async function writeOldLayout(dataDir: string, resources: Resource[]): Promise<void> {
  for (const dir of ["work-orders/pending", "work-orders/running", "work-orders/finished", "events", "snapshots/system", "auth/nodes"]) {
    await mkdir(join(dataDir, dir), { recursive: true, mode: 0o700 });
  }
  for (const type of RESOURCE_TYPES) await mkdir(join(dataDir, "resources", type), { recursive: true, mode: 0o700 });
  for (const r of resources) await writeRecord(dataDir, r.resourceType, r);
}

/** Writes `r` at resources/<dir>/<id>.json (`dir` a type name or a plural directory), making the directory if needed. */
export async function writeRecord(dataDir: string, dir: string, r: Resource): Promise<void> {
  await mkdir(join(dataDir, "resources", dir), { recursive: true, mode: 0o700 });
  await writeFile(join(dataDir, "resources", dir, `${r.id}.json`), encodeMessage(ResourceSchema, r), { mode: 0o600 });
}
