// One simulated agent's Session (NodeService.Session) for sim-fleet.ts's session mode, as skippy
// holds one: hello, welcome, a full heartbeat report, then a keepalive every interval; the orders
// the controller pushes (claimed for this session as they are pushed) go to `onOrder`; requests
// (an ack, a result) wait for their answer. A full report goes out again after each finished
// order (skippy's heartbeat right after an order is done: the tenant's targets follow it). A
// session that ends while the fleet runs is opened again a second later (counted as lost).
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";
import type {
  NodeService,
  HeartbeatRequestSchema,
  SessionAnswer,
  SessionAnswerSubject,
  SessionResponse,
} from "../gen/skipper/v1/node_service_pb.js";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { BenchSession } from "./session-phases.js";

/** The simulated host whose session this is (sim-fleet.ts SimNode). */
interface SimHost {
  readonly nodeId: string;
  readonly nodes: Client<typeof NodeService>;
}

type Kind = Parameters<BenchSession["send"]>[0];

export class SimSessionLink {
  private session: BenchSession | undefined;
  private readonly waiters = new Map<string, { resolve: (a: SessionAnswer) => void; reject: (e: Error) => void }>();
  private keepalive: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly node: SimHost,
    private readonly report: () => MessageInitShape<typeof HeartbeatRequestSchema>,
    private readonly onOrder: (order: WorkOrder) => void,
    private readonly onLost: () => void,
  ) {}

  /** Opens the session; resolves once welcomed and the full report is sent. */
  async open(): Promise<void> {
    const s = new BenchSession(this.node.nodes);
    s.send({ case: "hello", value: { nodeId: this.node.nodeId, agentVersion: "bench" } });
    const welcome = await s.next((m) => (m.kind.case === "welcome" ? m.kind.value : undefined));
    if (!welcome) throw new Error(`${this.node.nodeId}: the session ended before its welcome`);
    this.session = s;
    this.sendReport();
    const every = Number(welcome.heartbeatIntervalMs) || 10_000;
    this.keepalive = setInterval(() => s.send({ case: "heartbeat", value: {} }), every);
    void this.read(s);
  }

  /** Sends the full heartbeat report (what the node runs now). */
  sendReport(): void {
    this.session?.send({ case: "heartbeat", value: { report: this.report() } });
  }

  /** Sends `kind` and waits for the answer about `subject` and order `id`. */
  request(kind: Kind, subject: SessionAnswerSubject, id: string): Promise<SessionAnswer> {
    const s = this.session;
    if (!s) return Promise.reject(new Error(`${this.node.nodeId}: no session`));
    return new Promise((resolve, reject) => {
      this.waiters.set(`${subject}/${id}`, { resolve, reject });
      s.send(kind);
    });
  }

  close(): void {
    this.stopped = true;
    clearInterval(this.keepalive);
    void this.session?.close();
  }

  // Every message the controller sends: orders to onOrder, answers to whoever waits for them.
  private async read(s: BenchSession): Promise<void> {
    try {
      for (;;) {
        const m = await s.next((x: SessionResponse) => x);
        if (!m) break;
        if (m.kind.case === "order" && m.kind.value.workOrder) this.onOrder(m.kind.value.workOrder);
        else if (m.kind.case === "answer") {
          const key = `${m.kind.value.subject}/${m.kind.value.workOrderId}`;
          const w = this.waiters.get(key);
          this.waiters.delete(key);
          w?.resolve(m.kind.value);
        }
      }
    } catch {
      // ended with an error: as ended
    }
    clearInterval(this.keepalive);
    this.session = undefined;
    for (const w of this.waiters.values()) w.reject(new Error(`${this.node.nodeId}: the session ended`));
    this.waiters.clear();
    if (this.stopped) return;
    this.onLost();
    this.reopen();
  }

  // A second from now, opens the session again (and again, a second later, while that fails).
  private reopen(): void {
    setTimeout(() => {
      if (!this.stopped) this.open().catch(() => this.reopen());
    }, 1000);
  }
}
