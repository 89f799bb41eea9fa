// Response compression over the real transport (HTTP/2 + TLS, Connect JSON): a client that
// accepts gzip gets a small answer (one resource) as it is, since compressing it costs the
// controller more than the bytes saved, and a large one (a listing of many records) gzipped.
import { connect, constants } from "node:http2";
import { gunzipSync } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { COMPRESS_MIN_BYTES } from "../controller/boundary/rpc-handler.js";
import { ADMIN_TOKEN, startController, type TestController } from "./helpers/controller.js";

const started: TestController[] = [];
afterEach(async () => {
  for (const c of started.splice(0).reverse()) await c.stop();
});

/** One Connect JSON call accepting gzip; the answer's encoding and its body, decoded. */
async function call(tc: TestController, method: string, body: object): Promise<{ status: number; encoding: string; text: string }> {
  const session = connect(tc.url, { ca: tc.ca });
  try {
    return await new Promise((resolve, reject) => {
      const req = session.request({
        [constants.HTTP2_HEADER_METHOD]: "POST",
        [constants.HTTP2_HEADER_PATH]: `/v1/skipper.v1.${method}`,
        "content-type": "application/json",
        "accept-encoding": "gzip",
        "x-admin-token": ADMIN_TOKEN,
      });
      let status = 0;
      let encoding = "";
      const chunks: Buffer[] = [];
      req.on("response", (h) => {
        status = Number(h[constants.HTTP2_HEADER_STATUS]);
        encoding = String(h["content-encoding"] ?? "");
      });
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const raw = Buffer.concat(chunks);
        resolve({ status, encoding, text: (encoding === "gzip" ? gunzipSync(raw) : raw).toString("utf8") });
      });
      req.on("error", reject);
      req.end(JSON.stringify(body));
    });
  } finally {
    session.close();
  }
}

describe("response compression", () => {
  it("sends one resource uncompressed and a listing larger than the threshold gzipped, to a client that accepts gzip", async () => {
    const tc = await startController({ tls: true });
    started.push(tc);
    const nodes = tc.client(NodeService, { admin: true });
    for (let i = 0; i < 80; i++)
      await nodes.registerNode({ nodeId: `host-${String(i).padStart(3, "0")}`, labels: { zone: "a", rack: `r${i}` } });

    const one = await call(tc, "ResourceService/GetResource", { resourceType: "node", id: "host-000" });
    expect(one.status).toBe(200);
    expect(one.encoding).toBe("");
    expect(JSON.parse(one.text).resource.id).toBe("host-000");

    const all = await call(tc, "ResourceService/ListResources", { resourceType: "node", pageSize: 1000 });
    expect(all.status).toBe(200);
    expect(Buffer.byteLength(all.text)).toBeGreaterThan(COMPRESS_MIN_BYTES);
    expect(all.encoding).toBe("gzip");
    expect(JSON.parse(all.text).resources).toHaveLength(80);
  });
});
