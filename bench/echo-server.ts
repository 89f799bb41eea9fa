// The benchmark's ceiling for an RPC: a bare Connect server with one trivial HealthService.Check,
// served by the same serve() (HTTP/2 + TLS) and certificate as the controller, with no store, auth,
// logging or interceptors. Run as its own process; prints {"url": …} on stdout when listening.
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { HealthService } from "../gen/skipper/v1/health_service_pb.js";
import { serve } from "../controller/server.js";
import { ensureTlsMaterial } from "../controller/tls/tls-material.js";

const dataDir = process.argv[2];
if (!dataDir) throw new Error("usage: echo-server <data-dir>");

const tls = await ensureTlsMaterial({ dataDir });
const handler = connectNodeAdapter({
  requestPathPrefix: "/v1",
  routes: (router) => router.service(HealthService, { check: () => ({ status: "ok" }) }),
});
const serving = await serve(handler, { host: "127.0.0.1", port: 0, tls: { cert: tls.cert, key: tls.key } });
process.stdout.write(JSON.stringify({ url: serving.url }) + "\n");
process.on("SIGTERM", () => void serving.close().then(() => process.exit(0)));
