// The shape of a node's SSH target (NodeSpec.ssh), checked when an admin writes the node: an
// address ssh takes as a host (no user, no options), a port, a POSIX user name, a pinned host key
// ssh-keyscan would print, the secret value holding the private key, and the relay. Each failure
// is INVALID_ARGUMENT naming the field.
import type { SshTarget } from "../../gen/skipper/v1/resource_pb.js";
import { SECRET_VALUE_NAME } from "../../common/action-rules.js";
import { SSH_HOST_KEY, SSH_USER, sshAddressProblem } from "../../common/ssh-target-rules.js";
import { invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";

const FIELD = "desired_state.node.ssh";

/** Checks an SSH target; throws INVALID_ARGUMENT naming the field. */
export function checkSshTarget(ssh: SshTarget): void {
  const problem = sshAddressProblem(ssh.address);
  if (problem) throw invalid(`${FIELD}.address ${problem}`, { field: `${FIELD}.address` });
  if (ssh.port > 65535) throw invalid(`${FIELD}.port must be 1..65535 (0 for 22)`, { field: `${FIELD}.port` });
  if (!SSH_USER.test(ssh.user)) throw invalid(`${FIELD}.user must match ${SSH_USER.source}`, { field: `${FIELD}.user` });
  if (!SSH_HOST_KEY.test(ssh.hostKey.trim()))
    throw invalid(`${FIELD}.host_key must be "<type> <base64>" as ssh-keyscan prints it (ssh-ed25519, ecdsa-sha2-*, ssh-rsa)`, {
      field: `${FIELD}.host_key`,
    });
  if (!ssh.keySecret)
    throw invalid(`${FIELD}.key_secret must name the secret value holding the private key`, { field: `${FIELD}.key_secret` });
  checkId(ssh.keySecret.secretId, `${FIELD}.key_secret.secret_id`);
  if (!SECRET_VALUE_NAME.test(ssh.keySecret.key))
    throw invalid(`${FIELD}.key_secret.key must name a value of the secret`, { field: `${FIELD}.key_secret.key` });
  checkId(ssh.relayNodeId, `${FIELD}.relay_node_id`);
}
