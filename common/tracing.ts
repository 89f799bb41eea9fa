// Spans through OpenTelemetry's API. With no exporter configured (the default) the API records
// nothing and a span's ids are made here (trace-context.ts), so logs, events and orders still
// carry the trace. With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set,
// startTracing() loads the SDK and an OTLP/HTTP exporter, and spans are exported in batches to
// that collector (the exporter's usual OTEL_* variables apply). Either way a span continues the
// W3C trace context it is given.
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Span } from "@opentelemetry/api";
import { childSpan, formatTraceparent, parseTraceparent, type TraceContext } from "./trace-context.js";

const TRACER = "skipper";

/** A span begun here: its W3C context (for what it causes), and how to end it. */
export interface SpanHandle {
  context: TraceContext;
  traceparent: string;
  /** Ends the span; `error` (a code such as CONFLICT) marks it failed. */
  end(error?: string): void;
}

/** True when an exporter is configured in the environment. */
export function tracingConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) && env.OTEL_SDK_DISABLED !== "true";
}

/**
 * Registers the SDK with an OTLP/HTTP exporter when one is configured; returns what flushes and
 * stops it (a no-op otherwise).
 */
export async function startTracing(serviceName: string, env: NodeJS.ProcessEnv = process.env): Promise<() => Promise<void>> {
  if (!tracingConfigured(env)) return async () => {};
  const [{ TracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, { resourceFromAttributes }] = await Promise.all([
    import("@opentelemetry/sdk-trace"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/resources"),
  ]);
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": env.OTEL_SERVICE_NAME || serviceName }),
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter() })],
  });
  trace.setGlobalTracerProvider(provider);
  return async () => {
    await provider.forceFlush().catch(() => undefined);
    await provider.shutdown().catch(() => undefined);
  };
}

/**
 * Begins a span named `name` in the trace `parent` (a traceparent header; a new trace without a
 * valid one). `kind`: server for a call received, client for one made, internal otherwise.
 */
export function beginSpan(name: string, parent: string | undefined, kind: "server" | "client" | "internal" = "internal"): SpanHandle {
  const remote = parseTraceparent(parent);
  const parentContext = remote
    ? trace.setSpanContext(ROOT_CONTEXT, {
        traceId: remote.traceId,
        spanId: remote.spanId,
        traceFlags: remote.flags === "00" ? TraceFlags.NONE : TraceFlags.SAMPLED,
        isRemote: true,
      })
    : context.active();
  const otelKind = kind === "server" ? SpanKind.SERVER : kind === "client" ? SpanKind.CLIENT : SpanKind.INTERNAL;
  const span: Span = trace.getTracer(TRACER).startSpan(name, { kind: otelKind }, parentContext);
  // Recording (an SDK is registered): the span's own ids. Not recording: the API hands back the
  // parent's context (or an invalid one), so the ids are made here.
  const sc = span.spanContext();
  const own: TraceContext =
    span.isRecording() && trace.isSpanContextValid(sc)
      ? { traceId: sc.traceId, spanId: sc.spanId, flags: (sc.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED ? "01" : "00" }
      : childSpan(remote);
  return {
    context: own,
    traceparent: formatTraceparent(own),
    end(error) {
      if (error) span.setStatus({ code: SpanStatusCode.ERROR, message: error });
      span.end();
    },
  };
}
