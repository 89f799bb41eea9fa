// What to do when the controller refuses the agent's credential (UNAUTHENTICATED): one line that
// names the credential and the step that mends it, since retrying alone never will.
import type { AgentConfig } from "./config.js";

/** The action hint for a credential the controller refused with `message`. */
export function credentialHint(config: Pick<AgentConfig, "nodeId" | "token" | "controllerUrl">, message: string): string {
  const node = config.nodeId;
  const base = config.controllerUrl;
  if (config.token !== "") {
    return (
      `the controller refuses node ${node}'s token (${message}): it was issued by another controller or store, ` +
      `or rotated or deleted since. An admin issues a current one (POST ${base.replace(/\/v1$/, "")}/v1/nodes/${node}/token, ` +
      `or POST /v1/nodes to register ${node} on this store) and gives it to this agent (--token-file / SKIPPY_NODE_TOKEN), then restarts it`
    );
  }
  return (
    `the controller refuses node ${node}'s client certificate (${message}): it was revoked, or signed by another client CA. ` +
    `Enroll the node again with a new enrollment token (--enroll-token / SKIPPY_ENROLL_TOKEN), then restart the agent`
  );
}
