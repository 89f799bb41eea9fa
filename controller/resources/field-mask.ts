// Partial updates: an update_mask names the paths to take from the request; everything else
// keeps its stored value. Paths are proto field names from the resource, e.g.
// "desired_state.service.env" or "labels". A path may stop at any field; a map, list or message
// named by the mask is replaced whole (absent in the request means cleared).
import { fromJson, toJson, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ResourceSpecSchema, type ResourceSpec } from "../../gen/skipper/v1/resource_pb.js";
import { invalid } from "../base/errors.js";
import type { ResourceType } from "../../common/ids.js";
import { specCase } from "../../common/resource-kinds.js";

const JSON_OPTS = { useProtoFieldName: true } as const;

/** What a mask selects: desired-state paths (inside the spec) and whether labels/annotations go. */
export interface MaskPlan {
  specPaths: string[][];
  labels: boolean;
  annotations: boolean;
}

/** Validates mask paths for a resource type. Throws INVALID_REQUEST naming the bad path. */
export function planMask(type: ResourceType, paths: string[]): MaskPlan {
  const plan: MaskPlan = { specPaths: [], labels: false, annotations: false };
  const kind = snake(specCase(type));
  for (const path of paths) {
    const field = "update_mask";
    if (path === "labels" || path === "metadata.labels") {
      plan.labels = true;
      continue;
    }
    if (path === "annotations" || path === "metadata.annotations") {
      plan.annotations = true;
      continue;
    }
    const segs = path.split(".");
    if (segs[0] !== "desired_state") {
      throw invalid(
        `update_mask path ${JSON.stringify(path.slice(0, 128))} is not updatable (use desired_state.…, labels or annotations)`,
        { field, path: path.slice(0, 128) },
      );
    }
    if (segs.length === 1) {
      plan.specPaths.push([]);
      continue;
    }
    if (segs[1] !== kind) {
      throw invalid(`update_mask path ${JSON.stringify(path.slice(0, 128))} must start with desired_state.${kind} for a ${type}`, {
        field,
        path: path.slice(0, 128),
      });
    }
    checkPath(ResourceSpecSchema, segs.slice(1), path);
    plan.specPaths.push(segs.slice(1));
  }
  return plan;
}

/** Copies the masked paths from `incoming` onto `current`; returns the merged spec. */
export function applyMask(current: ResourceSpec | undefined, incoming: ResourceSpec | undefined, specPaths: string[][]): ResourceSpec {
  let merged = current ? (toJson(ResourceSpecSchema, current, JSON_OPTS) as JsonObject) : {};
  const from = incoming ? (toJson(ResourceSpecSchema, incoming, JSON_OPTS) as JsonObject) : {};
  for (const path of specPaths) {
    if (path.length === 0) {
      merged = structuredClone(from);
      continue;
    }
    setPath(merged, path, getPath(from, path));
  }
  return fromJson(ResourceSpecSchema, merged as JsonValue);
}

function checkPath(schema: DescMessage, segs: string[], path: string): void {
  let msg: DescMessage | undefined = schema;
  for (const [i, seg] of segs.entries()) {
    const f: DescField | undefined = msg?.fields.find((x) => x.name === seg);
    if (!msg || !f)
      throw invalid(`update_mask path ${JSON.stringify(path.slice(0, 128))}: no field ${JSON.stringify(seg.slice(0, 64))}`, {
        field: "update_mask",
        path: path.slice(0, 128),
      });
    const last = i === segs.length - 1;
    if (!last && f.fieldKind !== "message") {
      throw invalid(
        `update_mask path ${JSON.stringify(path.slice(0, 128))}: ${seg} has no sub-fields (maps and lists are replaced whole)`,
        { field: "update_mask", path: path.slice(0, 128) },
      );
    }
    msg = f.fieldKind === "message" ? f.message : undefined;
  }
}

function getPath(obj: JsonObject, path: string[]): JsonValue | undefined {
  let cur: JsonValue | undefined = obj;
  for (const seg of path) {
    if (cur === null || typeof cur !== "object" || Array.isArray(cur)) return undefined;
    cur = (cur as JsonObject)[seg];
  }
  return cur === undefined ? undefined : structuredClone(cur);
}

function setPath(obj: JsonObject, path: string[], value: JsonValue | undefined): void {
  let cur = obj;
  for (const seg of path.slice(0, -1)) {
    const next = cur[seg];
    if (next === null || typeof next !== "object" || Array.isArray(next)) cur[seg] = {};
    cur = cur[seg] as JsonObject;
  }
  const last = path[path.length - 1]!;
  if (value === undefined) delete cur[last];
  else cur[last] = value;
}

function snake(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
