// The span of each order the agent handles: `work_order <type>`, a child of the order's
// traceparent, from when the agent takes the order up (its claim, or its journal entry after a
// restart) until it is done with it (the result reported, or the order dropped). Every call the
// agent makes for the order sends this span's traceparent; the clients' interceptor
// (controller-client.ts) makes each call a client span under it. Exported like every span: over
// OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (common/tracing.ts), otherwise only ids are made.
import { Code, ConnectError } from "@connectrpc/connect";
import type { WorkOrder } from "../gen/skipper/v1/work_order_pb.js";
import { orderTypeName } from "../common/agent-counter-rules.js";
import { beginSpan, type SpanHandle } from "../common/tracing.js";
import { traceHeaders } from "./controller-client.js";

export class OrderSpans {
  // Order id -> its open span, and the error it ends with (a failed result's code).
  private readonly open = new Map<string, { span: SpanHandle; error?: string }>();

  /** Runs `handle` inside the order's span, begun here unless it is already open (a nested take-up). */
  async within(order: WorkOrder, handle: () => Promise<void>): Promise<void> {
    if (this.open.has(order.id)) return handle();
    const held: { span: SpanHandle; error?: string } = {
      span: beginSpan(`work_order ${orderTypeName(order.type)}`, order.traceparent || undefined),
    };
    this.open.set(order.id, held);
    try {
      await handle();
    } catch (e) {
      held.error ??= Code[ConnectError.from(e).code];
      throw e;
    } finally {
      this.open.delete(order.id);
      held.span.end(held.error);
    }
  }

  /** Marks the order's span failed with `code` (a result's code, or why the order was dropped). */
  fail(order: WorkOrder, code: string): void {
    const held = this.open.get(order.id);
    if (held) held.error = code;
  }

  /** Call options for a call made for `order`: its ids, and its span as the call's parent. */
  call(order: WorkOrder): { headers: Record<string, string> } {
    const traceparent = this.open.get(order.id)?.span.traceparent ?? order.traceparent;
    return traceHeaders({ requestId: order.requestId, correlationId: order.correlationId, traceparent });
  }
}
