// Where --metrics-listen serves the agent's metrics: HOST:PORT ([::1]:PORT for IPv6). The page
// has neither TLS nor a credential, so it is served on this host's loopback only (127.0.0.0/8,
// ::1, localhost) unless --metrics-allow-remote says the operator means another address.
import { isIP } from "node:net";

export interface MetricsAddress {
  host: string;
  /** 0: a free port, chosen when it listens (logged). */
  port: number;
}

const ADDRESS = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/;

/** Whether `host` names this host's loopback interface. */
export function isLoopback(host: string): boolean {
  if (host === "localhost" || host === "::1") return true;
  return isIP(host) === 4 && host.startsWith("127.");
}

/** Parses --metrics-listen; throws a message for people when it is malformed, or not loopback without `allowRemote`. */
export function parseMetricsAddress(text: string, allowRemote: boolean): MetricsAddress {
  const m = ADDRESS.exec(text.trim());
  const host = m?.[1] ?? m?.[2] ?? "";
  const port = Number(m?.[3]);
  if (!m || port > 65535 || (m[1] !== undefined && isIP(host) !== 6))
    throw new Error(`--metrics-listen must be HOST:PORT (e.g. 127.0.0.1:9464, [::1]:9464), got '${text}'`);
  if (!allowRemote && !isLoopback(host))
    throw new Error(
      `--metrics-listen ${text} is not a loopback address: the agent's metrics are served without TLS or a credential, so only on this host (127.0.0.1, ::1, localhost); add --metrics-allow-remote (SKIPPY_METRICS_ALLOW_REMOTE=1) to serve them on ${host} anyway`,
    );
  return { host, port };
}
