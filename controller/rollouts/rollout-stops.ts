// What stops a rollout from starting nodes now, apart from its own waves and budget: the tenant's
// maintenance windows (outside all of them, no node starts), a pin (no node starts), and freezes
// (a freeze of the tenant or of every tenant: no new wave; of nodes by selector: those nodes do
// not start). Pure: the caller reads the tenant, the freezes and the nodes' labels.
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { TenantSpec } from "../../gen/skipper/v1/resource_pb.js";
import type { FreezeSpec } from "../../gen/skipper/v1/rollout_pb.js";
import { matchesSelector } from "../domain/label-selector.js";
import { nextOpening, windowOpen } from "../resources/maintenance-window.js";

/** A freeze as stored: its id and spec. */
export interface Freeze {
  id: string;
  spec: FreezeSpec;
}

export interface RolloutStops {
  /** Why no node starts now (outside the windows, pinned), if so. */
  nodes?: string;
  /** Why no new wave starts now (a freeze of the tenant), if so. */
  waves?: string;
  /** Nodes that do not start now (a freeze by selector), and why. */
  frozenNodes: ReadonlyMap<string, string>;
  /** When one of the stops ends by itself (a window opens, a freeze ends), ms. */
  until?: number;
}

export const NO_STOPS: RolloutStops = { frozenNodes: new Map() };

/** The stops for `tenantId`'s rollout over `nodes` (id -> placement labels) at `now` (ms). */
export function stopsFor(input: {
  tenantId: string;
  spec?: TenantSpec;
  freezes: readonly Freeze[];
  nodes: ReadonlyMap<string, Record<string, string>>;
  now: number;
}): RolloutStops {
  const { spec, now } = input;
  let until: number | undefined;
  const ends = (t: number | undefined) => {
    if (t !== undefined && t > now) until = until === undefined ? t : Math.min(until, t);
  };
  let nodes: string | undefined;
  if (spec?.pin) nodes = `the tenant is pinned${spec.pin.reason ? ` (${spec.pin.reason})` : ""}; unpin it to roll out`;
  else if (!windowOpen(spec?.maintenanceWindows ?? [], now)) {
    const next = nextOpening(spec!.maintenanceWindows, now);
    ends(next);
    nodes = `outside the tenant's maintenance windows${next !== undefined ? `; the next opens at ${new Date(next).toISOString()}` : ""}`;
  }
  let waves: string | undefined;
  const frozenNodes = new Map<string, string>();
  for (const f of input.freezes) {
    const endsAt = f.spec.endsAt ? timestampMs(f.spec.endsAt) : 0;
    if (endsAt <= now) continue;
    const why = `frozen by freeze ${f.id} until ${new Date(endsAt).toISOString()}${f.spec.reason ? ` (${f.spec.reason})` : ""}`;
    if (Object.keys(f.spec.nodeSelector).length > 0) {
      let hit = false;
      for (const [id, labels] of input.nodes) {
        if (!matchesSelector(labels, f.spec.nodeSelector) || frozenNodes.has(id)) continue;
        frozenNodes.set(id, why);
        hit = true;
      }
      if (hit) ends(endsAt);
    } else if (f.spec.tenantId === "" || f.spec.tenantId === input.tenantId) {
      waves ??= why;
      ends(endsAt);
    }
  }
  return { nodes, waves, frozenNodes, until };
}
