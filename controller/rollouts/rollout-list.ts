// Lists stored rollouts newest first, of one tenant and in some statuses, a page at a time. The
// page token is the count of rollouts already returned, so a token is cheap to check and a
// rollout that starts meanwhile (it sorts first) shifts the pages by one at worst.
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { Rollout, RolloutStatus } from "../../gen/skipper/v1/rollout_pb.js";
import { invalid } from "../base/errors.js";
import { allResources } from "../store/each-page.js";
import type { Store } from "../store/store.js";
import { rolloutOf } from "./rollout-records.js";

const DEFAULT_PAGE = 100;
const MAX_PAGE = 1000;

export interface RolloutFilter {
  tenantId?: string;
  statuses?: readonly RolloutStatus[];
  pageSize?: number;
  pageToken?: string;
}

/** One page of rollouts, newest first, and the token of the next ("" on the last). */
export async function listRollouts(store: Store, f: RolloutFilter): Promise<{ items: Rollout[]; nextPageToken: string }> {
  if (f.pageSize !== undefined && (f.pageSize < 0 || f.pageSize > MAX_PAGE)) {
    throw invalid(`page_size must be 0 to ${MAX_PAGE}`, { field: "page_size" });
  }
  const token = f.pageToken ?? "";
  if (token !== "" && !/^[1-9][0-9]{0,8}$/.test(token)) throw invalid("page_token is not one this API returned", { field: "page_token" });
  const offset = token === "" ? 0 : Number(token);
  const size = f.pageSize || DEFAULT_PAGE;
  const statuses = f.statuses && f.statuses.length > 0 ? new Set(f.statuses) : undefined;
  const all = (await allResources(store, { resourceType: "rollout", tenantId: f.tenantId }))
    .map(rolloutOf)
    .filter((r): r is Rollout => r !== undefined && (!statuses || statuses.has(r.status)))
    .sort((a, b) => created(b) - created(a) || (a.id < b.id ? -1 : 1));
  const items = all.slice(offset, offset + size);
  return { items, nextPageToken: offset + size < all.length ? String(offset + size) : "" };
}

function created(r: Rollout): number {
  return r.createdAt ? timestampMs(r.createdAt) : 0;
}
