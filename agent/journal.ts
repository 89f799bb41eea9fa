// The agent's local record of orders it has claimed, so a restart cannot lose one. An entry is
// written (atomically, fsynced) before the claim is sent, marked claimed once the controller
// grants it, updated with the result once the executor returns (or, when the lease is lost while
// it runs, at once with a LEASE_LOST result), and removed once the controller has the result. On start, the agent reads what is left: an entry with a result is reported
// again (the controller answers a repeated report with the stored result); a claimed one is
// executed again (executors converge, so a second run finishes what the first began) and then
// reported, except an execute_command, which is reported failed (AGENT_RESTARTED) rather than run
// twice; one whose claim was in flight is taken up when the controller shows it running under
// this node's claim (granted, nothing ran under it), else claimed again or dropped when the
// controller refuses it. An order a session pushed is journaled before its ack ("unacked") and
// again once the ack is answered accepted ("acked"), before it runs: a restart takes up an acked
// one and leaves an unacked one to the controller (journal-recovery.ts says why).
import { mkdir, readdir, readFile, rename, rm, open } from "node:fs/promises";
import { join } from "node:path";
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { WorkOrderResultSchema, WorkOrderSchema, type WorkOrder, type WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import { ID_PATTERN } from "../common/ids.js";

export interface JournalEntry {
  order: WorkOrder;
  /** Unset while the claim is in flight (or, for a pushed order, until it runs). */
  claimedAt?: Date;
  result?: WorkOrderResult;
  /**
   * For an order a session pushed (claimed for it), before it runs: "unacked" until the controller
   * answered its ack accepted (or granted a renewal under its token), then "acked".
   */
  push?: PushState;
}

export type PushState = "unacked" | "acked";

interface Stored {
  schema_version: "v1";
  work_order: JsonValue;
  claimed_at?: string;
  result?: JsonValue;
  push?: PushState;
}

export class Journal {
  private readonly dir: string;

  constructor(stateDir: string) {
    this.dir = join(stateDir, "orders");
  }

  async open(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
  }

  async record(entry: JournalEntry): Promise<void> {
    if (!ID_PATTERN.test(entry.order.id)) throw new Error(`work order id ${JSON.stringify(entry.order.id)} is not a safe file name`);
    const stored: Stored = {
      schema_version: "v1",
      work_order: toJson(WorkOrderSchema, entry.order, { useProtoFieldName: true }),
      ...(entry.claimedAt ? { claimed_at: entry.claimedAt.toISOString() } : {}),
      ...(entry.result ? { result: toJson(WorkOrderResultSchema, entry.result, { useProtoFieldName: true }) } : {}),
      ...(entry.push ? { push: entry.push } : {}),
    };
    const path = join(this.dir, `${entry.order.id}.json`);
    const tmp = `${path}.tmp`;
    const fh = await open(tmp, "w", 0o600);
    try {
      await fh.writeFile(`${JSON.stringify(stored, null, 2)}\n`);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
    const d = await open(this.dir, "r");
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  }

  async remove(orderId: string): Promise<void> {
    await rm(join(this.dir, `${orderId}.json`), { force: true });
  }

  /** Entries left by an earlier run, oldest claim first (unclaimed last). Unreadable files are skipped and returned as problems. */
  async pending(): Promise<{ entries: JournalEntry[]; problems: string[] }> {
    const entries: JournalEntry[] = [];
    const problems: string[] = [];
    for (const name of await readdir(this.dir)) {
      if (name.endsWith(".tmp")) {
        await rm(join(this.dir, name), { force: true });
        continue;
      }
      if (!name.endsWith(".json")) continue;
      try {
        const s = JSON.parse(await readFile(join(this.dir, name), "utf8")) as Stored;
        entries.push({
          order: fromJson(WorkOrderSchema, s.work_order, { ignoreUnknownFields: true }),
          claimedAt: s.claimed_at ? new Date(s.claimed_at) : undefined,
          result: s.result ? fromJson(WorkOrderResultSchema, s.result, { ignoreUnknownFields: true }) : undefined,
          push: s.push === "unacked" || s.push === "acked" ? s.push : undefined,
        });
      } catch (e) {
        problems.push(`${name}: ${(e as Error).message}`);
      }
    }
    const at = (e: JournalEntry) => e.claimedAt?.getTime() ?? Number.MAX_SAFE_INTEGER;
    entries.sort((a, b) => at(a) - at(b));
    return { entries, problems };
  }
}
