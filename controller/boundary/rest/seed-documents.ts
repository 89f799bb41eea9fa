// Resource documents in the seed's shape on the REST routes that write resources: the mapping
// itself is shared (common/seed-documents.ts, the CLI uses it too); here a document it cannot map
// becomes the INVALID_REQUEST naming the field that the REST layer answers.
import type { JsonObject } from "@bufbuild/protobuf";
import { canonicalResource as mapResource, canonicalUpdate as mapUpdate, isSeedDocumentError } from "../../../common/seed-documents.js";
import { invalid } from "../../base/errors.js";

/** A CreateResource body (a Resource document) in canonical form; `pathType` is the route's resource_type. */
export function canonicalResource(body: JsonObject, pathType: string | undefined): JsonObject {
  return asInvalid(() => mapResource(body, pathType));
}

/** An UpdateResource body (PUT, body "*"): a seed document is turned into the request's fields. */
export function canonicalUpdate(body: JsonObject, pathType: string | undefined, pathId: string | undefined): JsonObject {
  return asInvalid(() => mapUpdate(body, pathType, pathId));
}

function asInvalid<T>(map: () => T): T {
  try {
    return map();
  } catch (e) {
    if (isSeedDocumentError(e)) throw invalid(e.message, { field: e.field });
    throw e;
  }
}
