// Delivery latency benchmark (npm run bench:delivery): from a push to a registry to the order that
// deploys it. Run on demand; it prints figures.
//
// A loopback registry (Debian's docker-registry, no auth), the controller as its own process
// (dist/controller/main.js, file store), one simulated node (sim-fleet.ts, session transport: it
// claims, "applies" at once and reports), one tenant whose service names the artifact `web`,
// watched every --interval (default 2 s), and one environment without constraints. The images are
// prepared beforehand (their blobs uploaded); a push is the last step of `docker push`: the
// manifest PUT under its tag. One warm-up push (1.0.0) is not timed; then --pushes pushes (default
// 20) of 1.0.1, 1.0.2, ..., each once the environment runs the one before, after a random wait
// in [0, interval) so that pushes land at random points of the watch's cycle.
//
// Per push: the first work_order_created of the tenant's deploy of that digest (the controller's
// event, from WatchEvents) minus the moment the manifest PUT returned. Split in two: the watch's
// wait (push -> delivery_version_discovered) and the passes (the version -> the order: the
// environment's pass promotes, the tenant's pass renders and queues). The ceiling is the watch
// interval plus the passes: the p99 target is under interval + 1 s.
//
// Options: --pushes <n> (20), --interval <ms> (2000), --timeout <s> per push (60).
import { createHash } from "node:crypto";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { gzipSync } from "node:zlib";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import { clientFor, type Controller, startController } from "./controller-process.js";
import { percentile } from "./measure.js";
import { stopChild } from "./node-child.js";
import { SimFleet } from "./sim-fleet.js";

const dist = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const ADMIN = "bench-admin-token-0123456789abcdef";
const TENANT = "bench-delivery";
const REPO = "shop/web";
const { values } = parseArgs({
  options: {
    pushes: { type: "string", default: "20" },
    interval: { type: "string", default: "2000" },
    timeout: { type: "string", default: "60" },
  },
});
const PUSHES = Number(values.pushes);
const INTERVAL_MS = Number(values.interval);
const TIMEOUT_MS = Number(values.timeout) * 1000;
if (![PUSHES, TIMEOUT_MS].every((n) => Number.isInteger(n) && n > 0) || !(INTERVAL_MS >= 1000))
  throw new Error("--pushes and --timeout must be positive integers, --interval at least 1000 ms");

const log = (line: string) => console.error(line);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const sha256 = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

/** What the controller told of one digest: when its version was recorded, when its first deploy order was. */
interface Told {
  discoveredAt?: number;
  orderAt?: number;
}

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

/** Debian's registry on a loopback port, no auth; its storage under `dir`. */
async function startRegistry(dir: string): Promise<{ host: string; child: ChildProcess }> {
  const host = `127.0.0.1:${await freePort()}`;
  await mkdir(join(dir, "storage"), { recursive: true });
  await writeFile(
    join(dir, "config.yml"),
    `version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: ${join(dir, "storage")}}}\nhttp: {addr: "${host}"}\n`,
  );
  const child = spawn("docker-registry", ["serve", join(dir, "config.yml")], { stdio: "ignore" });
  for (let i = 0; ; i++) {
    if ((await fetch(`http://${host}/v2/`).catch(() => undefined))?.status === 200) return { host, child };
    if (i > 300) throw new Error("the registry did not answer in 30 s (is docker-registry installed? scripts/docker-engine.sh install)");
    await sleep(100);
  }
}

/** Uploads a blob (monolithic: POST, then PUT with the body). */
async function uploadBlob(host: string, body: Buffer): Promise<string> {
  const digest = sha256(body);
  const start = await fetch(`http://${host}/v2/${REPO}/blobs/uploads/`, { method: "POST" });
  const location = start.headers.get("location");
  if (start.status !== 202 || !location) throw new Error(`blob upload refused (${start.status})`);
  const url = new URL(location, `http://${host}`);
  url.searchParams.set("digest", digest);
  const put = await fetch(url, { method: "PUT", body, headers: { "content-type": "application/octet-stream" } });
  if (put.status !== 201) throw new Error(`blob upload failed (${put.status})`);
  return digest;
}

/** An image per version, blobs uploaded now: answers the manifest to PUT later, and its digest. */
async function prepareImage(host: string, layer: { digest: string; size: number }, version: string) {
  const config = Buffer.from(
    JSON.stringify({ architecture: "amd64", os: "linux", config: { Labels: { version } }, rootfs: { type: "layers", diff_ids: [] } }),
  );
  const configDigest = await uploadBlob(host, config);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: configDigest, size: config.length },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: layer.digest, size: layer.size }],
    }),
  );
  return { version, manifest, digest: sha256(manifest) };
}

/** The manifest PUT: the push's last step. Answers when it returned. */
async function push(host: string, image: { version: string; manifest: Buffer }): Promise<number> {
  const r = await fetch(`http://${host}/v2/${REPO}/manifests/${image.version}`, {
    method: "PUT",
    body: image.manifest,
    headers: { "content-type": "application/vnd.oci.image.manifest.v1+json" },
  });
  const at = Date.now();
  if (r.status !== 201) throw new Error(`manifest PUT of ${image.version} failed (${r.status})`);
  return at;
}

const base = await mkdtemp(join(resolve(dist, ".."), ".bench-data-delivery-"));
let ctl: Controller | undefined;
let fleet: SimFleet | undefined;
let registry: ChildProcess | undefined;
const events = new AbortController();
for (const sig of ["SIGINT", "SIGTERM"] as const)
  process.once(sig, () => {
    fleet?.close();
    ctl?.child.kill("SIGKILL");
    registry?.kill("SIGKILL");
    void rm(base, { recursive: true, force: true }).finally(() => process.exit(130));
  });
try {
  const reg = await startRegistry(join(base, "registry"));
  registry = reg.child;
  const layerBody = gzipSync(Buffer.alloc(1024));
  const layer = { digest: await uploadBlob(reg.host, layerBody), size: layerBody.length };
  const images = [];
  for (let i = 0; i <= PUSHES; i++) images.push(await prepareImage(reg.host, layer, `1.0.${i}`));
  log(`delivery bench: registry ${reg.host}, ${PUSHES} timed pushes (+1 warm-up), watch interval ${INTERVAL_MS} ms, data in ${base}`);

  ctl = await startController(dist, join(base, "data"), ADMIN);
  const { url, ca } = ctl;
  const admin = { "x-admin-token": ADMIN };
  const resources = clientFor(ResourceService, url, ca, admin);
  const orders = clientFor(WorkOrderService, url, ca, admin);
  const eventsApi = clientFor(EventService, url, ca, admin);
  const deliveryApi = clientFor(DeliveryService, url, ca, admin);
  fleet = new SimFleet({ url, ca, workers: 4, applyMs: 0, heartbeatMs: 10_000, transport: "session", onFinished: () => undefined });
  const token = (await clientFor(NodeService, url, ca, admin).registerNode({ nodeId: "node-1", labels: { fleet: "bench" } })).token;
  fleet.add("node-1", token);
  await fleet.start();

  // What the controller tells, by digest.
  const told = new Map<string, Told>();
  const entry = (digest: string) => told.get(digest) ?? told.set(digest, {}).get(digest)!;
  void (async () => {
    for await (const m of eventsApi.watchEvents({ tenantId: TENANT }, { signal: events.signal })) {
      const e = m.event;
      if (!e?.timestamp) continue;
      const digest = e.data?.digest;
      if (e.type === "delivery_version_discovered" && typeof digest === "string") entry(digest).discoveredAt ??= timestampMs(e.timestamp);
      if (e.type === "work_order_created" && e.workOrderId) {
        const at = timestampMs(e.timestamp);
        const o = (await orders.getWorkOrder({ id: e.workOrderId }).catch(() => undefined))?.workOrder;
        // The tenant's deploy: its compose file pins the image by digest.
        const file = o?.desiredState?.composeProject?.composeFile ?? "";
        for (const img of images) if (file.includes(img.digest)) entry(img.digest).orderAt ??= at;
      }
    }
  })().catch((e) => {
    if (!events.signal.aborted) log(`the event watch ended: ${(e as Error).message}`);
  });

  const createRes = (type: string, id: string, value: object) =>
    resources.createResource({
      resourceType: type,
      resource: create(ResourceSchema, { id, resourceType: type, desiredState: { kind: { case: type, value } as never } }),
    });
  await createRes("tenant", TENANT, { deploymentPolicy: { nodeSelector: { fleet: "bench" } } });
  await createRes("artifact", "web", {
    tenantId: TENANT,
    source: { case: "image", value: { repository: `${reg.host}/${REPO}` } },
    watch: { interval: durationFromMs(INTERVAL_MS) },
  });
  await createRes("service", `${TENANT}-web`, { tenantId: TENANT, artifactId: "web", composeService: "web" });
  await createRes("delivery", "shop", { displayName: "Shop" });
  await createRes("environment", "live", { deliveryId: "shop", tenantIds: [TENANT], artifactIds: ["web"] });

  /** Waits until the environment runs `version` with nothing in flight. */
  async function runs(version: string): Promise<void> {
    const deadline = Date.now() + TIMEOUT_MS;
    for (;;) {
      const r = (await resources.getResource({ resourceType: "environment", id: "live" })).resource;
      const s = r?.currentState?.kind.case === "environment" ? r.currentState.kind.value : undefined;
      if (s?.current?.versions.some((v) => v.version === version) && !s.inFlight) return;
      if (Date.now() > deadline) throw new Error(`live does not run ${version} after ${TIMEOUT_MS / 1000} s: ${s?.message ?? "no status"}`);
      await sleep(50);
    }
  }
  async function orderOf(digest: string): Promise<Told> {
    const deadline = Date.now() + TIMEOUT_MS;
    while (entry(digest).orderAt === undefined) {
      if (Date.now() > deadline) throw new Error(`no deploy order of ${digest} after ${TIMEOUT_MS / 1000} s`);
      await sleep(10);
    }
    return entry(digest);
  }

  await push(reg.host, images[0]!);
  await orderOf(images[0]!.digest);
  await runs(images[0]!.version);
  log("warm-up: 1.0.0 deployed");

  const total: number[] = [];
  const watchWait: number[] = [];
  const passes: number[] = [];
  for (let i = 1; i <= PUSHES; i++) {
    await sleep(Math.random() * INTERVAL_MS);
    const img = images[i]!;
    const pushedAt = await push(reg.host, img);
    const t = await orderOf(img.digest);
    total.push(t.orderAt! - pushedAt);
    if (t.discoveredAt !== undefined) {
      watchWait.push(t.discoveredAt - pushedAt);
      passes.push(t.orderAt! - t.discoveredAt);
    }
    log(`push ${i}/${PUSHES} (${img.version}): order ${t.orderAt! - pushedAt} ms after the push`);
    await runs(img.version);
  }
  const versions = (await deliveryApi.listArtifactVersions({ artifactId: "web", pageSize: 1000 })).versions.length;
  const fig = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return `p50 ${percentile(s, 50).toFixed(0)} ms, p99 ${percentile(s, 99).toFixed(0)} ms, max ${(s.at(-1) ?? 0).toFixed(0)} ms`;
  };
  const sorted = [...total].sort((a, b) => a - b);
  const ceiling = INTERVAL_MS + 1000;
  console.log(`delivery latency: ${PUSHES} pushes at random offsets, watch interval ${INTERVAL_MS} ms, ${versions} versions recorded`);
  console.log(`  push -> first deploy order:  ${fig(total)}`);
  console.log(`  push -> version recorded:    ${fig(watchWait)}   (the watch's wait and its look)`);
  console.log(`  version -> deploy order:     ${fig(passes)}   (environment pass + tenant pass)`);
  console.log(
    `  ceiling (interval + 1 s): ${ceiling} ms; p99 ${percentile(sorted, 99).toFixed(0)} ms ${percentile(sorted, 99) < ceiling ? "is under it" : "is OVER it"}`,
  );
} finally {
  events.abort();
  fleet?.close();
  if (ctl) await stopChild(ctl.child);
  registry?.kill("SIGTERM");
  await rm(base, { recursive: true, force: true });
}
