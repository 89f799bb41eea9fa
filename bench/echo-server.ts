// The benchmark's ceiling for an RPC: a bare Connect server answering HealthService.Check and
// ResourceService.GetResource (the bench tenant, from memory), served by the same serve() (HTTP/2 + TLS) and certificate as the controller, with no store, auth,
// logging or interceptors. Run as its own process; prints {"url": …} on stdout when listening.
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import type { Resource } from "../gen/skipper/v1/resource_pb.js";
import { storedBenchTenant } from "./bench-tenant.js";
import { serve } from "../controller/server/listener.js";
import { ensureTlsMaterial } from "../controller/tls/tls-material.js";

const dataDir = process.argv[2];
if (!dataDir) throw new Error("usage: echo-server <data-dir>");

const tls = await ensureTlsMaterial({ dataDir });
const handler = connectNodeAdapter({
  requestPathPrefix: "/v1",
  routes: (router) => {
    router.service(HealthService, { check: () => ({ status: "ok" }) });
    // A read's ceiling: the same message a controller read returns, from memory.
    const tenants = new Map<string, Resource>();
    router.service(ResourceService, {
      getResource: (req) => {
        let r = tenants.get(req.id);
        if (!r) tenants.set(req.id, (r = storedBenchTenant(Number(req.id.replace(/^bench-tenant-/, "")))));
        return { resource: r };
      },
    });
  },
});
const serving = await serve(handler, { host: "127.0.0.1", port: 0, tls: { cert: tls.cert, key: tls.key } });
process.stdout.write(`${JSON.stringify({ url: serving.url })}\n`);
process.on("SIGTERM", () => void serving.close().then(() => process.exit(0)));
