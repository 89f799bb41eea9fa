// The structured logger: pino JSON lines with the seed's fields (timestamp, level, service,
// node_id, tenant_id, request_id, correlation_id, action, result, metadata), secrets redacted at
// any depth, written to stdout and to logs/YYYY-MM-DD/<service>.ndjson.
import pino, { type Logger } from "pino";
import { join } from "node:path";
import { DailyFileStream } from "./daily-file-stream.js";
import { redact } from "./redact.js";

export type { Logger } from "pino";

/** The levels --log-level accepts, for the controller and the agent alike. */
export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];

export interface LoggerOptions {
  /** Service name, e.g. "skipper-controller" or "skippy". */
  service: string;
  /** Data directory; when set, lines also go to <dataDir>/logs/YYYY-MM-DD/<service>.ndjson. */
  dataDir?: string;
  level?: string;
  /** Write to stdout as well (default true). */
  stdout?: boolean;
}

/** A logger plus a close() that flushes its file stream. */
export interface LoggerHandle {
  logger: Logger;
  close(): void;
}

/** Creates the process logger described above. */
export function createLogger(opts: LoggerOptions): LoggerHandle {
  const streams: pino.StreamEntry[] = [];
  const level = (opts.level ?? "info") as pino.Level;
  // stdout through sonic-boom, asynchronously: Node writes to pipes and terminals synchronously
  // on Linux, which would put every request's log line on the request's critical path.
  const out = opts.stdout !== false ? pino.destination({ fd: 1, sync: false }) : undefined;
  if (out) streams.push({ level, stream: out });
  const file = opts.dataDir ? new DailyFileStream(join(opts.dataDir, "logs"), opts.service) : undefined;
  if (file) streams.push({ level, stream: file });
  const logger = pino(
    {
      level: streams.length > 0 ? level : "silent",
      base: { service: opts.service },
      messageKey: "message",
      timestamp: () => `,"timestamp":"${new Date().toISOString()}"`,
      formatters: {
        level: (label) => ({ level: label }),
        log: (obj) => redact(obj),
      },
    },
    streams.length > 0 ? pino.multistream(streams) : undefined,
  );
  return {
    logger,
    close: () => {
      file?.end();
      try {
        out?.flushSync();
      } catch {
        // Nothing buffered, or stdout is gone.
      }
    },
  };
}
