import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { type ArtifactSpec, ArtifactSpecSchema, type ArtifactStatus, ArtifactStatusSchema } from "../../gen/skipper/v1/delivery_pb.js";
import { concludeWatch, failedWatch, planWatch, type WatchInput, watchIntervalMs } from "./registry-watch.js";

const NOW = Date.UTC(2026, 10, 29, 6, 0, 0);
const D = (n: number) => `sha256:${n.toString(16).padStart(64, "0")}`;

function artifact(range?: string, initialVersions = 0, intervalSeconds?: number): ArtifactSpec {
  return create(ArtifactSpecSchema, {
    tenantId: "shop",
    source: { case: "image", value: { repository: "127.0.0.1:5000/shop/web", registrySecretId: "" } },
    watch: {
      ...(range ? { filter: { case: "semverRange" as const, value: range } } : {}),
      initialVersions,
      ...(intervalSeconds ? { interval: { seconds: BigInt(intervalSeconds), nanos: 0 } } : {}),
    },
  });
}
function status(fields: Partial<Omit<ArtifactStatus, "$typeName">> & { watchedMsAgo?: number } = {}): ArtifactStatus {
  const { watchedMsAgo, ...rest } = fields;
  return create(ArtifactStatusSchema, {
    ...rest,
    ...(watchedMsAgo !== undefined ? { watchedAt: timestampFromMs(NOW - watchedMsAgo) } : {}),
  });
}
function input(over: Partial<WatchInput>): WatchInput {
  return { artifact: artifact("^1.0.0"), status: undefined, recorded: new Map(), listed: [], now: NOW, ...over };
}

describe("planWatch", () => {
  it("a first watch takes the newest initial_versions matching tags, newest first", () => {
    const listed = ["1.0.0", "1.1.0", "1.2.0", "1.2.1-rc.1", "1.3.0", "2.0.0", "latest"];
    const plan = planWatch(input({ artifact: artifact("^1.0.0", 2), listed }));
    expect(plan).toEqual({ firstWatch: true, newTags: ["1.3.0", "1.2.0"], recheck: [], deferred: 0 });
  });

  it("a later watch takes new tags newer than the oldest recorded, not the ones the first left out", () => {
    const listed = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.2.5"];
    const recorded = new Map([
      ["1.2.0", D(2)],
      ["1.3.0", D(3)],
    ]);
    const plan = planWatch(input({ status: status({ watchedMsAgo: 5000 }), recorded, listed }));
    expect(plan.firstWatch).toBe(false);
    expect(plan.newTags).toEqual(["1.4.0", "1.2.5"]);
    expect(plan.recheck).toEqual(["1.3.0", "1.2.0"]);
  });

  it("at most maxNew new tags a look, newest first; the rest are deferred", () => {
    const listed = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"];
    const recorded = new Map([["0.9.0", D(9)]]);
    const plan = planWatch(input({ artifact: artifact("*"), status: status({ watchedMsAgo: 1 }), recorded, listed }), { maxNew: 2 });
    expect(plan.newTags).toEqual(["1.4.0", "1.3.0"]);
    expect(plan.deferred).toBe(3);
  });

  it("moving tags are rechecked before versions, at most maxRechecks, and only while listed", () => {
    const recorded = new Map([
      ["1.0.0", D(1)],
      ["1.1.0", D(2)],
      ["latest", D(3)],
      ["gone", D(4)],
    ]);
    const plan = planWatch(
      input({ artifact: artifact(), status: status({ watchedMsAgo: 1 }), recorded, listed: ["1.0.0", "1.1.0", "latest"] }),
      {
        maxRechecks: 2,
      },
    );
    expect(plan.recheck).toEqual(["latest", "1.1.0"]);
  });

  it("with nothing recorded a later watch is a first one again", () => {
    const plan = planWatch(input({ artifact: artifact("*", 1), status: status({ watchedMsAgo: 1 }), listed: ["1.0.0", "2.0.0"] }));
    expect(plan).toMatchObject({ firstWatch: true, newTags: ["2.0.0"] });
  });
});

describe("concludeWatch", () => {
  it("creates the resolved new tags, says the newest version, and writes the first status", () => {
    const i = input({ listed: ["1.0.0", "1.1.0"] });
    const plan = planWatch(i);
    const out = concludeWatch(
      i,
      plan,
      new Map([
        ["1.1.0", D(11)],
        ["1.0.0", D(10)],
      ]),
    );
    expect(out.create).toEqual([
      { tag: "1.1.0", digest: D(11) },
      { tag: "1.0.0", digest: D(10) },
    ]);
    expect(out.status).toMatchObject({ watchError: "", latestVersion: "1.1.0", versions: 2, movedTags: [] });
    expect(out.status.watchedAt).toEqual(timestampFromMs(NOW));
    expect(out.status.nextWatchAt).toEqual(timestampFromMs(NOW + 60_000));
    expect(out.write).toBe(true);
  });

  it("a tag without a digest (its lookup failed) is left for the next look", () => {
    const i = input({ listed: ["1.0.0", "1.1.0"] });
    const out = concludeWatch(i, planWatch(i), new Map([["1.0.0", D(10)]]));
    expect(out.create).toEqual([{ tag: "1.0.0", digest: D(10) }]);
  });

  it("a recorded tag with another digest is moved, reported once, and cleared when seen back", () => {
    const recorded = new Map([
      ["1.0.0", D(1)],
      ["latest", D(2)],
    ]);
    const first = input({
      artifact: artifact(),
      status: status({ watchedMsAgo: 90_000, latestVersion: "1.0.0", versions: 2 }),
      recorded,
      listed: ["1.0.0", "latest"],
    });
    const moved = concludeWatch(
      first,
      planWatch(first),
      new Map([
        ["latest", D(7)],
        ["1.0.0", D(1)],
      ]),
    );
    expect(moved.create).toEqual([]);
    expect(moved.moved).toEqual(["latest"]);
    expect(moved.status.movedTags).toEqual(["latest"]);
    expect(moved.write).toBe(true);

    const again = { ...first, status: moved.status, now: NOW + 5000 };
    const still = concludeWatch(
      again,
      planWatch(again),
      new Map([
        ["latest", D(7)],
        ["1.0.0", D(1)],
      ]),
    );
    expect(still.moved).toEqual([]);
    expect(still.status.movedTags).toEqual(["latest"]);
    expect(still.write).toBe(false);

    const back = concludeWatch(
      again,
      planWatch(again),
      new Map([
        ["latest", D(2)],
        ["1.0.0", D(1)],
      ]),
    );
    expect(back.status.movedTags).toEqual([]);
    expect(back.write).toBe(true);
  });

  it("an idle watch writes its status at most once a minute", () => {
    const recorded = new Map([["1.0.0", D(1)]]);
    const base = { recorded, listed: ["1.0.0"] };
    const settled = status({ latestVersion: "1.0.0", versions: 1 });
    const fresh = input({ ...base, status: create(ArtifactStatusSchema, { ...settled, watchedAt: timestampFromMs(NOW - 59_000) }) });
    expect(concludeWatch(fresh, planWatch(fresh), new Map([["1.0.0", D(1)]])).write).toBe(false);
    const stale = input({ ...base, status: create(ArtifactStatusSchema, { ...settled, watchedAt: timestampFromMs(NOW - 60_000) }) });
    expect(concludeWatch(stale, planWatch(stale), new Map([["1.0.0", D(1)]])).write).toBe(true);
  });

  it("a pattern watch of moving tags names the newest created as latest", () => {
    const a = create(ArtifactSpecSchema, { watch: { filter: { case: "tagPattern", value: "main-.*" } } });
    const i = input({ artifact: a, listed: ["main-a", "main-b", "x"] });
    const out = concludeWatch(
      i,
      planWatch(i),
      new Map([
        ["main-a", D(1)],
        ["main-b", D(2)],
      ]),
    );
    expect(out.create.map((c) => c.tag)).toEqual(["main-a", "main-b"]);
    expect(out.status.latestVersion).toBe("main-a");
  });
});

describe("failedWatch", () => {
  it("keeps the last good look, says the error, and is written once", () => {
    const before = status({ watchedMsAgo: 5000, latestVersion: "1.0.0", versions: 1 });
    const i = input({ status: before, recorded: new Map([["1.0.0", D(1)]]) });
    const out = failedWatch(i, "registry 127.0.0.1:5000, repository shop/web: cannot reach 127.0.0.1:5000", 4000);
    expect(out.status.watchedAt).toEqual(before.watchedAt);
    expect(out.status.nextWatchAt).toEqual(timestampFromMs(NOW + 4000));
    expect(out.status.watchError).toContain("cannot reach");
    expect(out.write).toBe(true);
    expect(failedWatch({ ...i, status: out.status, now: NOW + 4000 }, out.status.watchError, 8000).write).toBe(false);
  });
});

describe("watchIntervalMs", () => {
  it("is the watch's interval, 60 s by default, at least 1 s", () => {
    expect(watchIntervalMs(artifact())).toBe(60_000);
    expect(watchIntervalMs(artifact(undefined, 0, 5))).toBe(5000);
    expect(watchIntervalMs(create(ArtifactSpecSchema, { watch: { interval: { seconds: 0n, nanos: 1000 } } }))).toBe(1000);
  });
});
