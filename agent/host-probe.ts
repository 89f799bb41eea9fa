// What the host can run (the engine, Compose), probed at start, again every minute, and at once
// when an order found the engine down. A change in what it can run is logged once.
import type { Logger } from "pino";
import type { DockerHost } from "./engine/docker-host.js";

// Capabilities are probed again this often, and right after an order found the engine down.
const PROBE_EVERY_MS = 60_000;

export class HostProbe {
  private host: DockerHost | undefined;
  private probing: Promise<DockerHost> | undefined;
  private probedAt = 0;

  /** `probe` finds out what the host can run. */
  constructor(
    private readonly probe: () => Promise<DockerHost>,
    private readonly log: Logger,
  ) {}

  /**
   * The host's capabilities. Probing runs Compose (a Python program for v1) and can take most of
   * a second, so only the first probe is waited for; later ones run in the background while the
   * loop goes on with the last answer. `force`: probe now (an order found the engine down).
   */
  async refresh(force = false): Promise<DockerHost> {
    if ((force || Date.now() - this.probedAt >= PROBE_EVERY_MS) && !this.probing) {
      this.probedAt = Date.now();
      this.probing = this.probeOnce(force).finally(() => (this.probing = undefined));
    }
    return this.host ?? (await this.probing!);
  }

  private async probeOnce(force: boolean): Promise<DockerHost> {
    const prev = this.host?.capabilities.message;
    const host = await this.probe();
    this.host = host;
    const c = host.capabilities;
    if (c.message !== prev || force) {
      const meta = {
        docker_version: c.dockerVersion,
        compose_variant: c.composeVariant,
        compose_version: c.composeVersion,
        message: c.message,
      };
      if (c.message)
        this.log.warn({ action: "capabilities", result: "degraded", metadata: meta }, `host cannot run deployments: ${c.message}`);
      else
        this.log.info({ action: "capabilities", result: "ok", metadata: meta }, `docker ${c.dockerVersion}, compose ${c.composeVersion}`);
    }
    return host;
  }
}
