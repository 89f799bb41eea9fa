// The registry watch loop over a real file store, with a clock the test moves and a registry client
// it answers: the first look at once (versions DISCOVERED, the promotion loop woken once, the
// status written), the next after the interval; a moved tag told once; a refused login backs off,
// an unreachable registry does not; the status is not rewritten while nothing but its clocks
// changed; an artifact changed through the API is looked at at once. Looks are observed (the
// client counts its listings), never waited for by a fixed delay.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type ArtifactStatus, ArtifactSpecSchema, VersionOrigin } from "../gen/skipper/v1/delivery_pb.js";
import { type Resource, ResourceSchema } from "../gen/skipper/v1/resource_pb.js";
import { SecretSpecSchema } from "../gen/skipper/v1/secret_pb.js";
import { createLogger } from "../common/logging/logger.js";
import { versionOf } from "../controller/delivery/artifact-versions.js";
import { RegistryError } from "../controller/promotion/registry-error.js";
import { RegistryWatchLoop } from "../controller/promotion/registry-watch-loop.js";
import { sealSecret } from "../controller/resources/secret-values.js";
import { FileStore } from "../controller/store/file/file-store.js";
import { SecretKeyRing } from "../controller/tls/secret-key-ring.js";

const REPO = "127.0.0.1:5000/shop/web";
const INTERVAL = 2000;
const digest = (n: number) => `sha256:${String(n).padStart(64, "0")}`;

describe("registry watch loop", () => {
  let dir: string;
  let store: FileStore;
  let ring: SecretKeyRing;
  let loop: RegistryWatchLoop | undefined;
  let now: number;
  let tags: Map<string, string>;
  let failWith: RegistryError | undefined;
  const calls: Array<{ at: number; password: string | undefined }> = [];
  let woken = 0;
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  let listings = 0;
  const roundWaiters: Array<{ n: number; resolve: () => void }> = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "skipper-regwatch-loop-"));
    store = new FileStore(dir);
    await store.open();
    ring = await SecretKeyRing.load({ dataDir: dir });
    now = Date.parse("2026-11-29T10:00:00Z");
    tags = new Map([
      ["1.0.0", digest(1)],
      ["1.1.0", digest(2)],
      ["2.0.0-rc.1", digest(3)],
    ]);
    failWith = undefined;
    calls.length = 0;
    woken = 0;
    const at = new Date(now);
    const secret = sealSecret(
      create(SecretSpecSchema, { tenantId: "shop", registry: "127.0.0.1:5000", values: { username: "u", password: "p4ssw0rd" } }),
      undefined,
      { ring, id: "shop-registry", now: at },
    );
    await store.createResource(
      create(ResourceSchema, { id: "shop-registry", resourceType: "secret", desiredState: { kind: { case: "secret", value: secret } } }),
    );
    await store.createResource(artifact());
    listings = 0;
    const scan = store.scanResources.bind(store);
    store.scanResources = async (f) => {
      const page = await scan(f);
      if (f.resourceType === "artifact") {
        listings++;
        for (const w of roundWaiters.filter((w) => listings >= w.n)) w.resolve();
      }
      return page;
    };
  });
  afterEach(async () => {
    await loop?.stop();
    loop = undefined;
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  function artifact(intervalMs = INTERVAL): Resource {
    const spec = create(ArtifactSpecSchema, {
      tenantId: "shop",
      source: { case: "image", value: { repository: REPO, registrySecretId: "shop-registry" } },
      watch: { interval: durationFromMs(intervalMs), filter: { case: "semverRange", value: "^1.0.0" } },
    });
    return create(ResourceSchema, { id: "web", resourceType: "artifact", desiredState: { kind: { case: "artifact", value: spec } } });
  }

  function start(): void {
    loop = new RegistryWatchLoop({
      store,
      logger: createLogger({ service: "test", stdout: false, level: "silent" }).logger,
      now: () => new Date(now),
      keyRing: ring,
      listEveryMs: 50,
      random: () => 1,
      versionChanged: () => woken++,
      client: {
        listTags: async (_repo, call) => {
          calls.push({ at: now, password: call?.credential?.password });
          for (const w of waiters.filter((w) => calls.length >= w.n)) w.resolve();
          if (failWith) throw failWith;
          return [...tags.keys()];
        },
        digestOf: async (_repo, tag) => tags.get(tag)!,
      },
    });
    loop.start();
  }
  // `p`, or a failure naming `what` after 10 s (the loop polls every 50 ms: a look due comes within one).
  async function within(what: string, p: Promise<void>): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no ${what} within 10 s`)), 10_000);
    });
    try {
      await Promise.race([p, late]);
    } finally {
      clearTimeout(timer);
    }
  }
  // Resolves once the client listed `n` times in all, and the look that listed has ended.
  async function looks(n: number): Promise<void> {
    if (calls.length < n) await within(`look ${n}`, new Promise<void>((resolve) => waiters.push({ n, resolve })));
    await settled();
  }
  // Resolves once the loop listed the artifacts `k` more times (each listing reads the clock after it) and that round ended.
  async function rounds(k: number): Promise<void> {
    const n = listings + k;
    await within(`listing ${n}`, new Promise<void>((resolve) => roundWaiters.push({ n, resolve })));
    await settled();
  }
  // The look under way ends with its status write (or none): wait for the next listing to start, or for the round to end.
  async function settled(): Promise<void> {
    const l = loop as unknown as { round?: Promise<void> };
    while (l.round) await l.round;
  }
  const stored = async () => (await store.getResource("artifact", "web"))!;
  const statusOf = (r: Resource): ArtifactStatus | undefined =>
    r.currentState?.kind.case === "artifact" ? r.currentState.kind.value : undefined;
  const versions = async () =>
    (await store.listResources({ resourceType: "artifact_version", pageSize: 100 })).items.map((r) => versionOf(r)!);
  const moveEvents = async () => (await store.listEvents({ type: "delivery_tag_moved", pageSize: 100 })).items;

  it("looks at once with the tenant's secret, records the matching tags, wakes the promotion loop once, then waits its interval", async () => {
    start();
    await looks(1);
    expect(calls[0]!.password).toBe("p4ssw0rd");
    const vs = await versions();
    expect(vs.map((v) => [v.version, v.digest, v.origin])).toEqual([
      ["1.0.0", digest(1), VersionOrigin.DISCOVERED],
      ["1.1.0", digest(2), VersionOrigin.DISCOVERED],
    ]);
    expect(woken).toBe(1);
    const s = statusOf(await stored())!;
    expect([s.latestVersion, s.versions, s.watchError]).toEqual(["1.1.0", 2, ""]);
    // Not again before the interval: listings go on (the loop polls), looks do not.
    now += INTERVAL - 1;
    await rounds(2);
    expect(calls).toHaveLength(1);
    now += 1;
    await looks(2);
    expect(calls[1]!.at - calls[0]!.at).toBe(INTERVAL);
    expect(woken).toBe(1);
  });

  it("a tag that moved is listed and told once; the version keeps its digest", async () => {
    start();
    await looks(1);
    tags.set("1.0.0", digest(9));
    now += INTERVAL;
    await looks(2);
    expect(statusOf(await stored())!.movedTags).toEqual(["1.0.0"]);
    now += INTERVAL;
    await looks(3);
    const events = await moveEvents();
    expect(events).toHaveLength(1);
    expect(events[0]!.data).toMatchObject({ tag: "1.0.0", recorded_digest: digest(1), registry_digest: digest(9) });
    expect((await versions()).find((v) => v.version === "1.0.0")!.digest).toBe(digest(1));
  });

  it("an idle look rewrites nothing until watched_at is a minute old", async () => {
    start();
    await looks(1);
    const first = (await stored()).metadata!.resourceVersion;
    now += INTERVAL;
    await looks(2);
    expect((await stored()).metadata!.resourceVersion).toBe(first);
    now += 60_000;
    await looks(3);
    expect((await stored()).metadata!.resourceVersion).not.toBe(first);
  });

  it("a refused login backs off (interval + 5 s with the most jitter); an unreachable registry is tried at the interval", async () => {
    failWith = new RegistryError("UNAUTHORIZED", { registry: "127.0.0.1:5000", repository: REPO, status: 401 }, "the login was refused");
    start();
    await looks(1);
    const s = statusOf(await stored())!;
    expect(s.watchError).toBe("registry 127.0.0.1:5000, repository 127.0.0.1:5000/shop/web: the login was refused (HTTP 401)");
    expect(s.watchError).not.toContain("p4ssw0rd");
    now += INTERVAL;
    await rounds(2);
    expect(calls).toHaveLength(1);
    now += 5000;
    await looks(2);
    failWith = new RegistryError("UNREACHABLE", { registry: "127.0.0.1:5000", repository: REPO }, "connection refused");
    // The second refusal waited up to 10 s; the unreachable one after it waits the interval alone.
    now += INTERVAL + 10_000;
    await looks(3);
    now += INTERVAL;
    await looks(4);
    expect(calls[3]!.at - calls[2]!.at).toBe(INTERVAL);
    expect(statusOf(await stored())!.watchError).toMatch(/connection refused/);
  });

  it("an artifact changed elsewhere is looked at at once; so is one whose registry secret changed through the API", async () => {
    start();
    await looks(1);
    // Another spec (as another controller would write it): the next listing sees it.
    await store.updateResource("artifact", "web", (cur) => {
      cur.desiredState = artifact(60_000).desiredState;
      return cur;
    });
    await looks(2);
    expect(calls[1]!.at).toBe(calls[0]!.at);
    // The same spec, its secret changed: the API's trigger reschedules it.
    const secret = (await store.getResource("secret", "shop-registry"))!;
    loop!.resourceChanged(secret);
    await looks(3);
    expect(calls[2]!.at).toBe(calls[0]!.at);
  });
});
