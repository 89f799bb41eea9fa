// A controller for unit tests of its domain modules: build() over the real file store in a temp
// dir, called through its in-memory router transport (the real interceptors and services, no
// HTTP). Clients carry the admin token or a node's bearer token in headers, as agents do.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient, type Client, type Transport } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import { build, type BuildOptions, type Controller } from "../../controller/server/build.js";
import { createLogger } from "../../common/logging/logger.js";
import type { EventFilter } from "../../controller/store/store.js";

export const IN_MEMORY_ADMIN_TOKEN = "t-admin";

export interface InMemoryController {
  ctl: Controller;
  dataDir: string;
  /** A client that calls as the admin. */
  admin<S extends DescService>(service: S): Client<S>;
  /** A client that calls with `token` as its bearer token (a node's). */
  asNode<S extends DescService>(service: S, token: string): Client<S>;
  /** Every stored event matching `filter`, oldest first. */
  events(filter?: EventFilter): Promise<Event[]>;
  /** Closes the controller and removes its data dir. */
  close(): Promise<void>;
}

/**
 * Builds a controller in a fresh temp dir. No periodic sweep, and node liveness is checked only
 * hourly, so neither a slow machine nor a fake clock (`now`) turns a node offline mid-test.
 */
export async function startInMemory(
  opts: Partial<Omit<BuildOptions, "dataDir" | "logger" | "adminToken">> = {},
): Promise<InMemoryController> {
  const dataDir = await mkdtemp(join(tmpdir(), "skipper-unit-"));
  const { logger, close: closeLog } = createLogger({ service: "t", stdout: false, level: "silent" });
  const ctl = await build({
    dataDir,
    logger,
    adminToken: IN_MEMORY_ADMIN_TOKEN,
    reconcileIntervalMs: 0,
    livenessCheckMs: 3_600_000,
    ...opts,
  });
  const withHeaders = <S extends DescService>(service: S, headers: Record<string, string>): Client<S> =>
    createClient(service, sendingHeaders(ctl.transport, headers));
  return {
    ctl,
    dataDir,
    admin: (service) => withHeaders(service, { "x-admin-token": IN_MEMORY_ADMIN_TOKEN }),
    asNode: (service, token) => withHeaders(service, { authorization: `Bearer ${token}` }),
    async events(filter = {}) {
      const out: Event[] = [];
      let pageToken = "";
      do {
        const page = await ctl.store.listEvents({ ...filter, pageSize: 1000, pageToken });
        out.push(...page.items);
        pageToken = page.nextPageToken;
      } while (pageToken !== "");
      return out;
    },
    async close() {
      await ctl.close();
      closeLog();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

// The transport with `headers` added to every call (unless the call sets them itself).
function sendingHeaders(t: Transport, headers: Record<string, string>): Transport {
  const add = (given: ConstructorParameters<typeof Headers>[0]): Headers => {
    const h = new Headers(given);
    for (const [k, v] of Object.entries(headers)) if (!h.has(k)) h.set(k, v);
    return h;
  };
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) =>
      t.unary(method, signal, timeoutMs, add(header), input, contextValues),
    stream: (method, signal, timeoutMs, header, input, contextValues) =>
      t.stream(method, signal, timeoutMs, add(header), input, contextValues),
  };
}
