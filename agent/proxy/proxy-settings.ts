// The agent's proxy settings (its --proxy-* flags) and the one HostProxy per configuration file
// that every deploy on this agent shares (it caches the tables it wrote).
import { runCommand } from "../engine/run-command.js";
import { HostProxy } from "./host-proxy.js";
import { HaproxyRuntime, ProxyError, ReloadRefused, type RuntimeAddress } from "./haproxy-runtime.js";

export interface ProxySettings {
  /** The worker's Runtime API: a unix socket path, or HOST:PORT on loopback. */
  runtime: string;
  /** The file skippy writes (the host's HAProxy loads it after its own). */
  configPath: string;
  /** Where skippy's frontend listens. */
  listen: string;
  /** HAProxy's master CLI socket (-S): reloads are its `reload`. */
  master?: string;
  /** Otherwise the command that reloads HAProxy (e.g. systemctl reload haproxy). */
  reloadCommand?: string[];
}

/** A runtime address from a flag: an absolute socket path, or a loopback HOST:PORT. */
export function runtimeAddress(s: string): RuntimeAddress {
  if (s.startsWith("/")) return { path: s };
  const m = /^(127\.0\.0\.1|localhost|\[::1\]):(\d{1,5})$/.exec(s);
  if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535)
    throw new Error(`--proxy-runtime takes an absolute socket path or a loopback HOST:PORT, got '${s}'`);
  return { host: m[1] === "[::1]" ? "::1" : m[1]!, port: Number(m[2]) };
}

/** What the node reports of its proxy (NodeCapabilities.proxy): "" when it drives none. */
export function proxyCapability(s: ProxySettings | undefined): string {
  return s ? `haproxy (runtime ${s.runtime}, frontend ${s.listen})` : "";
}

const proxies = new Map<string, HostProxy>();

/** The HostProxy of `s` (one per configuration file). */
export function hostProxyFor(s: ProxySettings): HostProxy {
  let p = proxies.get(s.configPath);
  if (!p) {
    p = new HostProxy({ runtime: runtimeAddress(s.runtime), configPath: s.configPath, listen: s.listen, reload: reloader(s) });
    proxies.set(s.configPath, p);
  }
  return p;
}

function reloader(s: ProxySettings): () => Promise<void> {
  if (s.master) {
    const master = new HaproxyRuntime({ path: s.master });
    // The master re-executes itself on a reload: a second reload right after may find its socket
    // closed for a moment.
    return async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          await master.reload();
          return;
        } catch (e) {
          if (e instanceof ReloadRefused || attempt >= 20) throw e;
          await new Promise((r) => setTimeout(r, 250));
        }
      }
    };
  }
  const cmd = s.reloadCommand ?? [];
  return async () => {
    if (cmd.length === 0) throw new ProxyError("no way to reload HAProxy: set --proxy-master or --proxy-reload-command");
    const run = await runCommand(cmd[0]!, cmd.slice(1), { timeoutMs: 60_000 });
    if (run.exitCode !== 0)
      throw new ProxyError(`${cmd.join(" ")} failed (exit ${run.exitCode}): ${run.stderr.trim().split("\n").pop() ?? ""}`);
  };
}
