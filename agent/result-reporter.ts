// The end of an order on the agent: its result reported until the controller has it (transient
// errors retried with backoff, for as long as the agent runs; a refusal drops it), then the
// observed state of what it touched (state-report.ts), then its journal entry removed. Stopped
// before the controller has it, the entry stays and the next start reports it again.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { ServiceObservation } from "../gen/skipper/v1/resource_pb.js";
import type { WorkOrder, WorkOrderResult } from "../gen/skipper/v1/work_order_pb.js";
import { Backoff } from "../common/backoff.js";
import type { AgentTally } from "./agent-tally.js";
import { LEASE_LOST } from "./agent-results.js";
import type { ControllerClients } from "./controller-client.js";
import { sleep } from "./engine/sleep.js";
import type { Journal } from "./journal.js";
import { TRANSIENT } from "./lease-keeper.js";
import type { OrderSpans } from "./order-spans.js";
import { reportStates } from "./state-report.js";
import type { OrderChannel } from "./session/order-channel.js";

export interface ResultReporterDeps {
  nodeId: string;
  clients: ControllerClients;
  /** Where results go: the session while it is up, the unary call otherwise. */
  channel: OrderChannel;
  journal: Journal;
  tally: AgentTally;
  spans: OrderSpans;
}

export class ResultReporter {
  constructor(private readonly deps: ResultReporterDeps) {}

  /**
   * Reports the result until the controller has it, then the observed states; clears the journal.
   * `reported` is told once the controller has answered (accepted or refused).
   */
  async report(
    order: WorkOrder,
    result: WorkOrderResult,
    services: ServiceObservation[],
    signal: AbortSignal,
    log: Logger,
    reported: () => void = () => {},
  ): Promise<void> {
    const retry = new Backoff();
    for (;;) {
      try {
        await this.deps.channel.report(order, result);
        reported();
        break;
      } catch (e) {
        const err = ConnectError.from(e);
        if (!TRANSIENT.has(err.code)) {
          reported();
          // A lost lease's result is expected to be refused: another claim has the order.
          log[result.code === LEASE_LOST ? "info" : "error"](
            { action: "report_result", result: Code[err.code], metadata: { message: err.rawMessage } },
            "controller refused the result; dropping it",
          );
          await this.deps.journal.remove(order.id);
          return;
        }
        if (signal.aborted) return; // the journal keeps it for the next start
        this.deps.tally.count("reportRetries");
        const delay = retry.next();
        log.warn(
          { action: "report_result", result: Code[err.code], metadata: { retry_in_ms: delay, message: err.rawMessage } },
          "could not report the result; retrying",
        );
        await sleep(delay, signal);
      }
    }
    log.info({ action: "report_result", result: "ok" }, "result reported");
    await reportStates(
      { channel: this.deps.channel, nodeId: this.deps.nodeId, call: this.deps.spans.call(order) },
      order,
      result,
      services,
      log,
    );
    await this.deps.journal.remove(order.id);
  }
}
