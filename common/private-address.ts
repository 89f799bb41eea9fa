// Where a webhook may be delivered: public addresses only, unless its subscription allows the
// private network (Webhook.allow_private_network). Checked on the URL when it is written (an IP
// literal, localhost) and on every address its host resolves to at each attempt (a name that
// resolves to 127.0.0.1 or 169.254.169.254 is refused then), so a subscription cannot be aimed at
// the sender's own network and read back what answers there. One rule for both senders: the
// controller (controller/webhooks/) and an agent delivering for a node (deliver_webhook).
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP } from "node:net";

// Loopback, unspecified, private, carrier-grade NAT, link-local (cloud metadata), benchmarking,
// documentation, multicast and reserved ranges, in both families (IPv4-mapped IPv6 included).
const blocked = new BlockList();
for (const [net, bits] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  blocked.addSubnet(net, bits, "ipv4");
}
for (const [net, bits] of [
  ["::", 128],
  ["::1", 128],
  ["::ffff:0:0", 96],
  ["64:ff9b::", 96],
  ["100::", 64],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  blocked.addSubnet(net, bits, "ipv6");
}

/** True when `address` (an IP literal) is not a public unicast address. */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  if (family === 6) {
    // IPv4-mapped (::ffff:a.b.c.d): judged as the IPv4 address it carries.
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return blocked.check(mapped[1]!, "ipv4");
    return blocked.check(address, "ipv6");
  }
  return blocked.check(address, "ipv4");
}

/** Why `url` may not be written for a subscription that does not allow the private network, or undefined. */
export function privateUrlProblem(url: URL): string | undefined {
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase();
  if (host === "localhost" || host.endsWith(".localhost")) return `${host} is this machine`;
  if (isPrivateAddress(host)) return `${host} is not a public address`;
  return undefined;
}

/** Thrown (as a lookup error) when a host resolves to an address the subscription may not reach. */
export class PrivateAddressError extends Error {
  readonly code = "PRIVATE_ADDRESS";
  constructor(host: string, address: string) {
    super(`${host} resolves to ${address}, not a public address (the subscription does not allow the private network)`);
  }
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for an HTTPS request that refuses a host resolving to any non-public address: the
 * connection is never made to it, whatever the name says.
 */
export function publicOnlyLookup(hostname: string, options: object, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, "");
    const list = addresses as LookupAddress[];
    const bad = list.find((a) => isPrivateAddress(a.address));
    if (bad) return callback(new PrivateAddressError(hostname, bad.address), "");
    if ((options as { all?: boolean }).all) return callback(null, list);
    const first = list[0];
    if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: "ENOTFOUND" }), "");
    callback(null, first.address, first.family);
  });
}
