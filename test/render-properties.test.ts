// Properties of the compose renderer and the snapshot diff over generated inputs: a seeded
// generator builds worlds of services, networks, volumes and limits with awkward strings (dollars,
// YAML 1.1 booleans, quotes, newlines, unicode), and every property is checked for each seed. A
// failure names its seed, so it can be replayed.
import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { parse } from "yaml";
import { ResourceSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { renderProject, type RenderInput } from "../controller/reconcile/render-project.js";
import { diffJson } from "../controller/snapshots/build-snapshot.js";

const SEEDS = 300;

/** mulberry32: a small deterministic PRNG. */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const shuffle = <T>(xs: readonly T[]): T[] => {
    const out = [...xs];
    for (let i = out.length - 1; i > 0; i--) {
      const j = int(i + 1);
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    return out;
  };
  return { next, int, pick, shuffle };
}
type Rng = ReturnType<typeof rng>;

const AWKWARD = [
  "yes",
  "no",
  "on",
  "off",
  "null",
  "~",
  "1.0",
  "0x10",
  "007",
  "",
  "$HOME",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: one of the awkward values, on purpose
  "${X}",
  "a$$b",
  "it's",
  'say "hi"',
  "line\nbreak",
  "tab\there",
  "ünïcødé",
  "#not-a-comment",
  "- dash",
  "key: value",
  "[1,2]",
  "{a: 1}",
  "*alias",
  "&anchor",
  "!tag",
  "%percent",
  "@at",
  "`tick`",
];
const str = (r: Rng) => (r.next() < 0.5 ? r.pick(AWKWARD) : `v${r.int(1000)}`);
const key = (r: Rng) => r.pick(["A", "B", "PATH_X", "DB_URL", "MODE", "x-y", "Z9", "TOKEN_HINT", "LOWER"]);

function generate(seed: number): RenderInput {
  const r = rng(seed);
  const tenantId = "t1";
  const nets = Array.from({ length: r.int(3) }, (_, i) =>
    create(ResourceSchema, {
      id: `net-${i}`,
      resourceType: "network",
      desiredState: { kind: { case: "network", value: { tenantId, driver: r.pick(["", "bridge"]), internal: r.next() < 0.3 } } },
    }),
  );
  const vols = Array.from({ length: r.int(3) }, (_, i) =>
    create(ResourceSchema, {
      id: `vol-${i}`,
      resourceType: "volume",
      desiredState: {
        kind: { case: "volume", value: { tenantId, driver: r.pick(["", "local"]), mountPath: r.pick(["", "/data", "/var/lib/x"]) } },
      },
    }),
  );
  const lims = Array.from({ length: r.int(3) }, (_, i) =>
    create(ResourceSchema, {
      id: `lim-${i}`,
      resourceType: "resource_limits",
      desiredState: {
        kind: {
          case: "resourceLimits",
          value: { cpus: r.pick([0, 0.25, 1.5]), memoryBytes: BigInt(r.pick([0, 64, 512])) << 20n, pids: BigInt(r.pick([0, 100])) },
        },
      },
    }),
  );
  const n = 1 + r.int(6);
  const ids = Array.from({ length: n }, (_, i) => `svc-${i}`);
  const services = ids.map((id, i) =>
    create(ResourceSchema, {
      id,
      resourceType: "service",
      desiredState: {
        kind: {
          case: "service",
          value: {
            tenantId,
            image: r.pick(["busybox:stable", `registry.local/app@sha256:${"a".repeat(64)}`, "nginx"]),
            env: Object.fromEntries(Array.from({ length: r.int(5) }, () => [key(r), str(r)])),
            command: Array.from({ length: r.int(4) }, () => str(r)),
            ports: Array.from({ length: r.int(3) }, () => ({
              hostPort: 1024 + r.int(60000),
              containerPort: 1 + r.int(65000),
              hostIp: r.pick(["", "127.0.0.1"]),
              protocol: r.pick(["", "udp"]),
            })),
            networkIds: nets.filter(() => r.next() < 0.5).map((x) => x.id),
            volumeIds: vols.filter(() => r.next() < 0.5).map((x) => x.id),
            resourceLimitsId: lims.length > 0 && r.next() < 0.5 ? r.pick(lims).id : "",
            // Only earlier services: no cycles (the API refuses them before rendering).
            dependsOn: ids.slice(0, i).filter(() => r.next() < 0.3),
            composeService: r.next() < 0.2 ? `compose-${i}` : "",
          },
        },
      },
    }),
  );
  const tenant = create(ResourceSchema, { id: tenantId, resourceType: "tenant", desiredState: { kind: { case: "tenant", value: {} } } });
  return {
    tenant,
    services,
    networks: new Map(nets.map((x) => [x.id, x])),
    volumes: new Map(vols.map((x) => [x.id, x])),
    limits: new Map(lims.map((x) => [x.id, x])),
  };
}

/** The same world, with every list and map in another order and every resource a fresh copy. */
function reordered(input: RenderInput, r: Rng): RenderInput {
  const copy = (x: Resource) => create(ResourceSchema, structuredClone(x));
  const remap = (m: Map<string, Resource>) => new Map(r.shuffle([...m.entries()]).map(([k, v]) => [k, copy(v)]));
  const services = r.shuffle(input.services).map((s) => {
    const c = copy(s);
    if (c.desiredState?.kind.case === "service")
      c.desiredState.kind.value.env = Object.fromEntries(r.shuffle(Object.entries(c.desiredState.kind.value.env)));
    return c;
  });
  return {
    tenant: copy(input.tenant),
    services,
    networks: remap(input.networks),
    volumes: remap(input.volumes),
    limits: remap(input.limits),
  };
}

const spec = (s: Resource) => (s.desiredState?.kind.case === "service" ? s.desiredState.kind.value : undefined)!;
const undollar = (v: string) => v.replaceAll("$$", "$");

describe("compose renderer over generated worlds", () => {
  it("renders the same bytes and hash for the same world in any order", () => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const world = generate(seed);
      const a = renderProject(world);
      const b = renderProject(reordered(world, rng(seed * 7919)));
      expect(b.project.composeFile, `seed ${seed}`).toBe(a.project.composeFile);
      expect(b.specHash, `seed ${seed}`).toBe(a.specHash);
    }
  });

  it("writes what each service asks for, readable as YAML 1.1 (compose v1) and 1.2 alike", () => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const world = generate(seed);
      const file = renderProject(world).project.composeFile;
      for (const version of ["1.1", "1.2"] as const) {
        const doc = parse(file, { version }) as {
          services: Record<string, Record<string, unknown>>;
          networks?: Record<string, unknown>;
          volumes?: Record<string, unknown>;
        };
        expect(Object.keys(doc.services).length, `seed ${seed}`).toBe(world.services.length);
        for (const s of world.services) {
          const sp = spec(s);
          const out = doc.services[sp.composeService || s.id]!;
          expect(out.image, `seed ${seed} ${s.id}`).toBe(sp.image);
          const env = Object.fromEntries(
            Object.entries((out.environment ?? {}) as Record<string, string>).map(([k, v]) => [k, undollar(v)]),
          );
          expect(env, `seed ${seed} ${s.id} ${version}`).toEqual(sp.env);
          expect(((out.command ?? []) as string[]).map(undollar), `seed ${seed} ${s.id}`).toEqual(sp.command);
          expect(out.networks ?? [], `seed ${seed}`).toEqual([...sp.networkIds].sort());
          for (const n of sp.networkIds) expect(doc.networks?.[n], `seed ${seed}`).toBeDefined();
          for (const v of sp.volumeIds) expect(doc.volumes?.[v], `seed ${seed}`).toBeDefined();
        }
      }
    }
  });

  it("a change to any one env value, image or limit changes the hash", () => {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const world = generate(seed);
      const before = renderProject(world).specHash;
      const r = rng(seed * 31);
      const changed = reordered(world, r);
      const target = r.pick(changed.services);
      const sp = spec(target);
      const what = r.int(3);
      if (what === 0) sp.env[key(r)] = `changed-${seed}`;
      else if (what === 1) sp.image = `${sp.image}-changed`;
      else sp.command = [...sp.command, "--changed"];
      expect(renderProject(changed).specHash, `seed ${seed} change ${what}`).not.toBe(before);
    }
  });
});

describe("snapshot diff over generated JSON", () => {
  function json(r: Rng, depth: number): unknown {
    const k = depth > 3 ? r.int(4) : r.int(6);
    if (k === 0) return str(r);
    if (k === 1) return r.int(100);
    if (k === 2) return r.next() < 0.5;
    if (k === 3) return null;
    if (k === 4) return Array.from({ length: r.int(3) }, () => json(r, depth + 1));
    return Object.fromEntries(Array.from({ length: 1 + r.int(4) }, (_, i) => [`k${i}`, json(r, depth + 1)]));
  }
  // A path of object keys down to a leaf of `v`, if it has one.
  function leafPath(v: unknown, r: Rng, path: string[] = []): string[] | undefined {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return path.length > 0 ? path : undefined;
    const keys = Object.keys(v);
    if (keys.length === 0) return undefined;
    const k = r.pick(keys);
    return leafPath((v as Record<string, unknown>)[k], r, [...path, k]);
  }

  it("is empty between a state and a copy of itself, and names exactly the one leaf changed", () => {
    let changedCases = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const r = rng(seed);
      const a = { root: json(r, 0) } as Record<string, unknown>;
      expect(diffJson(a as never, structuredClone(a) as never, ""), `seed ${seed}`).toEqual([]);
      const path = leafPath(a, r);
      if (!path) continue;
      const b = structuredClone(a);
      let at: Record<string, unknown> = b;
      for (const k of path.slice(0, -1)) at = at[k] as Record<string, unknown>;
      const last = path[path.length - 1]!;
      const old = at[last];
      at[last] = `changed-${seed}`;
      if (JSON.stringify(old) === JSON.stringify(at[last])) continue;
      changedCases++;
      expect(diffJson(a as never, b as never, ""), `seed ${seed}`).toEqual([[path.join("."), old, `changed-${seed}`]]);
    }
    expect(changedCases).toBeGreaterThan(SEEDS / 2);
  });
});
