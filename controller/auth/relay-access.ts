// A relay acting for an SSH node (NodeSpec.ssh): the relay's agent calls with its own credential
// and the header x-skipper-relay-for naming the SSH node, and is then that node for the call,
// as if an agent ran there (heartbeats, claims, results, secrets of its orders). Only for a node
// whose spec names the caller as its relay: any other is FORBIDDEN, and so is a relay of a relay.
// The principal keeps the relay's id, whose credential every later check asks about.
import { forbidden } from "../base/errors.js";
import type { Principal } from "../base/context.js";
import type { Store } from "../store/store.js";
import { isValidId } from "../../common/ids.js";

/** The header a relay names the SSH node with. */
export const RELAY_FOR_HEADER = "x-skipper-relay-for";

/** The principal for a call made by `caller` for `target`: target itself, relayed by caller. */
export async function relayedPrincipal(nodes: Pick<Store, "getResource">, caller: Principal, target: string): Promise<Principal> {
  if (caller.kind !== "node" || caller.relayNodeId !== undefined) {
    throw forbidden(`${RELAY_FOR_HEADER} is for a relay node's own credential`, { field: RELAY_FOR_HEADER });
  }
  if (target === caller.nodeId) return caller;
  if (!(await relayServes(nodes, caller.nodeId, target))) {
    throw forbidden(`node ${caller.nodeId} is not the relay of node ${target.slice(0, 128)}`, { node_id: target.slice(0, 128) });
  }
  return { ...caller, nodeId: target, relayNodeId: caller.nodeId };
}

/**
 * Whether `relayId` is the relay of `target` now: the target is a live node whose spec names it.
 * Asked when a relayed call is admitted, and again by a relayed stream admitted a while ago.
 */
export async function relayServes(nodes: Pick<Store, "getResource">, relayId: string, target: string): Promise<boolean> {
  const node = isValidId(target) ? await nodes.getResource("node", target) : undefined;
  const spec = node?.desiredState?.kind.case === "node" ? node.desiredState.kind.value : undefined;
  return node !== undefined && !node.deletion && spec?.ssh?.relayNodeId === relayId;
}

/** The node whose credential a node principal presented (the relay's, when relayed). */
export function credentialNodeOf(p: Extract<Principal, { kind: "node" }>): string {
  return p.relayNodeId ?? p.nodeId;
}
