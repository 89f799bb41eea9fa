// Replays what a stop interrupted. Alone on its store, a controller does it before it serves;
// sharing one, the leader does when it takes over (the old leader's loops may have left work).
import { v4 as uuidv4 } from "uuid";
import type { Logger } from "../../../common/logging/logger.js";
import type { Store } from "../../store/store.js";
import type { SnapshotWriter } from "../../snapshots/snapshot-writer.js";
import type { TargetRecords } from "../../reconcile/target-records.js";
import { recoverOrderOutcomes } from "../../dispatch/order-outcome.js";
import { failUnissuedDeployments } from "../../reconcile/unissued-deployments.js";

export interface RecoveryDeps {
  store: Store;
  snapshots: SnapshotWriter;
  records: TargetRecords;
  logger: Logger;
  now: () => Date;
}

/** The start-up recovery: interrupted order outcomes, deployments never issued, snapshots owed. */
export function startupRecovery({ store, snapshots, records, logger, now }: RecoveryDeps): () => Promise<void> {
  return async () => {
    const repaired = (await recoverOrderOutcomes({ store, snapshots, records })) + (await failUnissuedDeployments(store, now()));
    if (repaired > 0)
      logger.warn({ action: "recover", result: "ok", metadata: { repaired } }, "replayed interrupted work-order transitions");
    // In the background: it reads every tenant's latest snapshot, which start-up need not wait for
    // (a snapshot read waits for it instead).
    void snapshots
      .catchUp({ requestId: `startup-${uuidv4()}`, correlationId: "startup" })
      .then((owed) => {
        if (owed > 0) logger.info({ action: "recover", result: "ok", metadata: { snapshots: owed } }, "writing snapshots a stop left owed");
      })
      .catch((e: unknown) => logger.error({ action: "recover", result: "error", err: e }, "could not look for snapshots a stop left owed"));
  };
}
