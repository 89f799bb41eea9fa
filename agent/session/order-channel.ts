// How a held order's lease renewals and result reach the controller: over the agent's session
// (session-link.ts) while one is up, by the unary calls otherwise; so do the observed states
// reported after a result. Either way a refusal rejects
// with a ConnectError of the code the unary call would have answered with (so lease-keeper.ts and
// result-reporter.ts treat both alike: TRANSIENT codes retried, the rest a refusal), and a
// session that broke before its answer rejects with UNAVAILABLE (retried: over the next session
// or unary; a result that had landed is answered `duplicate` then).
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ReportResourceStateRequestSchema } from "../../gen/skipper/v1/node_service_pb.js";
import type { WorkOrder, WorkOrderResult } from "../../gen/skipper/v1/work_order_pb.js";
import type { ControllerClients } from "../controller-client.js";
import type { OrderSpans } from "../order-spans.js";
import type { SessionLink } from "./session-link.js";

/** Renews a held order's lease and reports its result. */
export interface OrderChannel {
  /** Renews the lease of `order` under its claim's token; resolves with the order as it stands. */
  renew(order: WorkOrder, timeoutMs: number): Promise<WorkOrder | undefined>;
  /** Reports `result` of `order` under its claim's token. */
  report(order: WorkOrder, result: WorkOrderResult): Promise<void>;
  /** Reports observed state (on a session: sent, and a refusal logged when it comes). */
  reportState(req: StateReport, call: { headers: Record<string, string> }): Promise<void>;
}

/** What ReportResourceState takes. */
export type StateReport = MessageInitShape<typeof ReportResourceStateRequestSchema>;

/** The session while one is up (use/drop), the unary calls otherwise. */
export class SwitchingChannel implements OrderChannel {
  private link: SessionLink | undefined;

  constructor(
    private readonly clients: ControllerClients,
    private readonly spans: OrderSpans,
  ) {}

  /** From now on requests go over `link` (until it is dropped). */
  use(link: SessionLink): void {
    this.link = link;
  }

  /** `link` ended: requests go unary again (unless another link took its place). */
  drop(link: SessionLink): void {
    if (this.link === link) this.link = undefined;
  }

  /** Whether a session carries the requests now. */
  get onSession(): boolean {
    return this.link?.up === true;
  }

  async renew(order: WorkOrder, timeoutMs: number): Promise<WorkOrder | undefined> {
    const token = order.claim?.fencingToken ?? 0n;
    const link = this.link;
    if (link?.up) return (await link.renew(order.id, token, timeoutMs)).workOrder;
    const res = await this.clients.orders.renewWorkOrderLease(
      { id: order.id, fencingToken: token },
      { ...this.spans.call(order), timeoutMs },
    );
    return res.workOrder;
  }

  async report(order: WorkOrder, result: WorkOrderResult): Promise<void> {
    const token = order.claim?.fencingToken ?? 0n;
    const link = this.link;
    if (link?.up) {
      await link.result(order.id, token, result);
      return;
    }
    await this.clients.orders.reportWorkOrderResult({ id: order.id, result, fencingToken: token }, this.spans.call(order));
  }

  async reportState(req: StateReport, call: { headers: Record<string, string> }): Promise<void> {
    const link = this.link;
    if (link?.up) link.send({ case: "stateReport", value: req });
    else await this.clients.nodes.reportResourceState(req, call);
  }
}
