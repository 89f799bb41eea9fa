// What an SSH target's fields may hold, shared by the controller (which checks a node's spec) and
// the relay agent (which checks again before it writes them into ssh's files): nothing in them
// can become an ssh option, a second host or a second line of known_hosts.

/** POSIX-portable user names (no leading '-', nothing ssh could read as an option). */
export const SSH_USER = /^[a-z_][a-z0-9_.-]{0,31}$/;

/** A public key as ssh-keyscan prints it, "<type> <base64>", an optional one-line comment. */
export const SSH_HOST_KEY =
  /^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{16,8192}={0,3}( [^\r\n\0]{0,256})?$/;

const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const IPV6 = /^[0-9A-Fa-f:.]{2,45}$/;

/** Why `address` cannot be an SSH host (a sentence fragment), or undefined when it can. */
export function sshAddressProblem(address: string): string | undefined {
  if (address === "") return "is required";
  if (HOSTNAME.test(address)) return undefined;
  if (address.includes(":") && IPV6.test(address)) return undefined;
  return "must be a host name or an IP address (no user, port or brackets)";
}

/** The key's "<type> <base64>" without its comment. */
export function hostKeyBody(hostKey: string): string {
  return hostKey.trim().split(/\s+/).slice(0, 2).join(" ");
}
