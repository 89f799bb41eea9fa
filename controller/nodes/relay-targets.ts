// The SSH nodes a relay serves (NodeSpec.ssh.relay_node_id names it), as the relay needs them:
// how to reach each and, when asked, the private key opened from its secret. A key that cannot
// be opened (its secret or value gone) is listed with the reason, so the relay reports the node
// KEY_UNAVAILABLE instead of silently dropping it.
import { create } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { RelayTargetSchema, type RelayTarget } from "../../gen/skipper/v1/node_service_pb.js";
import { SshTargetSchema, type Resource } from "../../gen/skipper/v1/resource_pb.js";
import { toBinary } from "@bufbuild/protobuf";
import { openSecretValue } from "../resources/secret-values.js";
import type { SecretKeyRing } from "../tls/secret-key-ring.js";
import type { Store } from "../store/store.js";

const PAGE = 500;

/** The SSH nodes relayed by `relayId`, by node id; with their keys when `includeKeys`. */
export async function relayTargetsOf(
  store: Pick<Store, "scanResources" | "getResource">,
  ring: SecretKeyRing,
  relayId: string,
  includeKeys: boolean,
): Promise<{ targets: RelayTarget[]; opened: string[] }> {
  const targets: RelayTarget[] = [];
  const opened: string[] = [];
  let pageToken = "";
  do {
    const page = await store.scanResources({ resourceType: "node", pageSize: PAGE, pageToken });
    for (const node of page.items) {
      const spec = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value : undefined;
      // A node naming itself as its relay is not served: it would be two agents of one node.
      if (!spec?.ssh || spec.ssh.relayNodeId !== relayId || node.deletion || node.id === relayId) continue;
      const key = await keyOf(store, ring, node);
      if (includeKeys && key.value !== undefined) opened.push(`${spec.ssh.keySecret?.secretId}/${spec.ssh.keySecret?.key}`);
      targets.push(
        create(RelayTargetSchema, {
          nodeId: node.id,
          ssh: spec.ssh,
          revision: revisionOf(node, key.version),
          privateKey: includeKeys ? (key.value ?? "") : "",
          keyProblem: key.problem ?? "",
          disabled: spec.disabled,
        }),
      );
    }
    pageToken = page.nextPageToken ?? "";
  } while (pageToken);
  return { targets, opened };
}

async function keyOf(
  store: Pick<Store, "getResource">,
  ring: SecretKeyRing,
  node: Resource,
): Promise<{ value?: string; version: bigint; problem?: string }> {
  const ref = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value.ssh?.keySecret : undefined;
  if (!ref) return { version: 0n, problem: "the node's ssh.key_secret names no secret" };
  const secret = await store.getResource("secret", ref.secretId);
  if (secret?.desiredState?.kind.case !== "secret" || secret.deletion)
    return { version: 0n, problem: `secret ${ref.secretId} does not exist` };
  const spec = secret.desiredState.kind.value;
  // Checked when the node is written (a fleet secret); again here for nodes written before.
  if (spec.tenantId !== "")
    return { version: 0n, problem: `secret ${ref.secretId} is a tenant's: an SSH key must be a fleet secret (no tenant)` };
  const entry = spec.entries.find((e) => e.name === ref.key);
  const value = entry ? openSecretValue(ring, secret.id, spec, ref.key) : undefined;
  if (!entry || value === undefined) return { version: 0n, problem: `secret ${ref.secretId} holds no value ${ref.key}` };
  return { value, version: entry.version };
}

// What the relay compares to know when to fetch keys again: the ssh spec and the key's version.
function revisionOf(node: Resource, keyVersion: bigint): string {
  const spec = node.desiredState?.kind.case === "node" ? node.desiredState.kind.value.ssh : undefined;
  const h = createHash("sha256");
  h.update(toBinary(SshTargetSchema, spec ?? create(SshTargetSchema)));
  h.update(`\0${keyVersion}`);
  return h.digest("hex").slice(0, 16);
}
