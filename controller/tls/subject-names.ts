// Names a server certificate answers to. Requested names and the names found in an existing
// certificate are both reduced to one canonical form (lower-case DNS names without a trailing
// dot, compressed IPv6), so "is every requested name covered?" is a plain set lookup and a
// renewal is not triggered by spelling alone.
import type { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { TlsError } from "./tls-error.js";

/** One subjectAltName entry: a DNS name or an IP address, canonical. */
export interface SubjectName {
  type: "dns" | "ip";
  value: string;
}

// Letters, digits, hyphen and underscore per label (underscores appear in real host names and
// clients accept them); an optional leading "*." so a wildcard can be requested explicitly.
const DNS_NAME = /^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

/** Parses a DNS name or IP literal into canonical form; undefined if it is neither. */
export function parseSubjectName(raw: string): SubjectName | undefined {
  let s = raw.trim();
  if (s.startsWith("[") && s.endsWith("]")) s = s.slice(1, -1);
  // A zone id ("fe80::1%eth0") is local to one host and cannot appear in a certificate.
  if (s.includes("%")) return undefined;
  const family = isIP(s);
  if (family === 4) return { type: "ip", value: s };
  // The URL parser prints IPv6 the RFC 5952 way; it also turns a mixed "::ffff:1.2.3.4" into
  // hex groups, which @peculiar/x509's IP encoder needs (it misreads dotted quads in IPv6).
  if (family === 6) return { type: "ip", value: new URL(`http://[${s}]`).hostname.slice(1, -1) };
  const dns = s.toLowerCase().replace(/\.$/, "");
  return dns.length <= 253 && DNS_NAME.test(dns) ? { type: "dns", value: dns } : undefined;
}

/**
 * The names a generated server certificate must carry: localhost, the machine's host name (left
 * out if it is not a usable DNS name), the extra `hostnames`, 127.0.0.1 and ::1. Throws on an
 * extra name that is neither a DNS name nor an IP address.
 */
export function requestedNames(hostnames: readonly string[], machineHostname: string): SubjectName[] {
  const names: SubjectName[] = [{ type: "dns", value: "localhost" }];
  const machine = parseSubjectName(machineHostname);
  if (machine) names.push(machine);
  for (const raw of hostnames) {
    const name = parseSubjectName(raw);
    if (!name) {
      throw new TlsError(
        "TLS_HOSTNAME_INVALID",
        `TLS hostname '${raw}' is neither a DNS name nor an IP address (SKIPPER_TLS_HOSTNAMES / --tls-hostname)`,
      );
    }
    names.push(name);
  }
  names.push({ type: "ip", value: "127.0.0.1" }, { type: "ip", value: "::1" });
  return dedupe(names);
}

/**
 * The DNS and IP entries of a certificate's subjectAltName, canonical; other kinds are ignored.
 * Read from node:crypto's rendering ("DNS:a, IP Address:127.0.0.1"; a value with special
 * characters in JSON quotes), so checking stored material at start needs no X.509 library.
 */
export function certificateNames(cert: X509Certificate): SubjectName[] {
  const names: SubjectName[] = [];
  const entry = /(?:^|, )(DNS|IP Address|[^:,]+):("(?:[^"\\]|\\.)*"|[^,]*)/g;
  for (const m of (cert.subjectAltName ?? "").matchAll(entry)) {
    if (m[1] !== "DNS" && m[1] !== "IP Address") continue;
    let value = m[2]!;
    if (value.startsWith('"')) {
      try {
        value = JSON.parse(value) as string;
      } catch {
        continue;
      }
    }
    const parsed = parseSubjectName(value);
    if (parsed) names.push(parsed);
  }
  return names;
}

/** The entries of `wanted` that `have` does not contain. */
export function missingNames(wanted: readonly SubjectName[], have: readonly SubjectName[]): SubjectName[] {
  const present = new Set(have.map(key));
  return wanted.filter((n) => !present.has(key(n)));
}

/** "DNS:localhost" / "IP:::1", the way names appear in logs. */
export function formatName(n: SubjectName): string {
  return `${n.type === "dns" ? "DNS" : "IP"}:${n.value}`;
}

function dedupe(names: SubjectName[]): SubjectName[] {
  const seen = new Set<string>();
  return names.filter((n) => !seen.has(key(n)) && seen.add(key(n)));
}

const key = (n: SubjectName) => `${n.type}:${n.value}`;
