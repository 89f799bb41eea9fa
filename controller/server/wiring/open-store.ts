// The first step of build(): the store opened (a FileStore on the data directory unless one is
// given), the coordination among controllers, the metrics, and the metered store everything
// else writes through.
import { FileStore } from "../../store/file/file-store.js";
import type { Store } from "../../store/store.js";
import { soleCoordination, type Coordination } from "../../store/coordination.js";
import { ControllerMetrics } from "../../metrics/controller-metrics.js";
import { meteredStore } from "../../metrics/metered-store.js";
import { VERSION } from "../../base/version.js";
import type { BuildOptions } from "./build-options.js";

export interface OpenedStore {
  /** The metered store: what every other part of the controller reads and writes. */
  store: Store;
  coordination: Coordination;
  metrics: ControllerMetrics;
}

/** Opens the store and wraps it in the controller's metrics. */
export async function openStore(opts: Pick<BuildOptions, "store" | "dataDir" | "logger" | "coordination">): Promise<OpenedStore> {
  const logger = opts.logger;
  const backend =
    opts.store ??
    new FileStore(opts.dataDir, {
      onWarning: (msg: string, meta: object) => logger.warn({ action: "store", metadata: meta }, msg),
      onInfo: (msg: string, meta: object) => logger.info({ action: "store", result: "ok", metadata: meta }, msg),
    });
  await backend.open();
  const coordination = opts.coordination ?? soleCoordination();
  const metrics = new ControllerMetrics({ version: VERSION, backend: backend.backend, leading: () => coordination.leading });
  // Everything the controller writes goes through here: timed, with the work-order transitions
  // counted, whichever backend it is.
  const store = meteredStore(backend, metrics);
  return { store, coordination, metrics };
}
