// A relay (skippy --relay) serves the SSH nodes whose spec names it (NodeSpec.ssh.relay_node_id).
// Every RELAY_LOOK_MS it asks the controller which they are (ListRelayTargets, without keys);
// a node new to it, or whose target or key changed (its revision), is asked for again with its
// key (that call is audited) and (re)started (ssh-node.ts); a node no longer listed is stopped.
// New connections are opened at most HANDSHAKES at a time across all nodes.
import type { Logger } from "pino";
import { ConnectError } from "@connectrpc/connect";
import type { AgentConfig } from "../config.js";
import type { ControllerClients } from "../controller-client.js";
import type { RelayTarget } from "../../gen/skipper/v1/node_service_pb.js";
import { sleep } from "../engine/sleep.js";
import { Limiter } from "./ssh-link.js";
import { SshNode } from "./ssh-node.js";

/** How often a relay asks which SSH nodes it serves. */
export const RELAY_LOOK_MS = 10_000;
/** SSH handshakes a relay makes at once. */
export const HANDSHAKES = 4;

export class RelayLoop {
  private readonly nodes = new Map<string, SshNode>();
  private readonly handshakes = new Limiter(HANDSHAKES);

  constructor(private readonly deps: { config: AgentConfig; clients: ControllerClients; log: Logger; lookMs?: number }) {}

  /** Runs until `signal` aborts, then stops every node. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await this.look();
      } catch (e) {
        const err = ConnectError.from(e);
        this.deps.log.warn(
          { action: "relay_targets", result: "error", metadata: { message: err.rawMessage } },
          `relay targets: ${err.rawMessage}`,
        );
      }
      await sleep(this.deps.lookMs ?? RELAY_LOOK_MS, signal);
    }
    await Promise.all([...this.nodes.values()].map((n) => n.close()));
    this.nodes.clear();
  }

  private async look(): Promise<void> {
    const { config, clients } = this.deps;
    const listed = await clients.nodes.listRelayTargets({ nodeId: config.nodeId });
    const seen = new Set(listed.targets.map((t) => t.nodeId));
    for (const [id, node] of this.nodes) {
      if (seen.has(id)) continue;
      this.nodes.delete(id);
      await node.close({ forget: true });
    }
    const changed = listed.targets.filter((t) => this.nodes.get(t.nodeId)?.target.revision !== t.revision);
    if (changed.length === 0) return;
    const withKeys = await clients.nodes.listRelayTargets({ nodeId: config.nodeId, includeKeys: true });
    const starting = withKeys.targets.filter((t) => changed.some((c) => c.nodeId === t.nodeId));
    // Each node on its own: one whose start fails is logged and tried again at the next look,
    // and does not keep the others from starting.
    await Promise.all(starting.map((t) => this.restart(t)));
  }

  // (Re)starts one node; a failure leaves it out of `nodes`, so the next look tries it again.
  private async restart(t: RelayTarget): Promise<void> {
    const { config, clients, log } = this.deps;
    await this.nodes.get(t.nodeId)?.close();
    const node = new SshNode({ relay: config, clients, log, handshakes: this.handshakes }, t);
    this.nodes.set(t.nodeId, node);
    try {
      await node.start();
    } catch (e) {
      this.nodes.delete(t.nodeId);
      await node.close();
      log.warn(
        { action: "relay_start", result: "error", node_id: t.nodeId, metadata: { message: (e as Error).message } },
        `could not start relaying SSH node ${t.nodeId}: ${(e as Error).message}`,
      );
    }
  }
}
