// Process archives as artifacts (issue 34): a tenant's processes that name a process_archive
// artifact run the version its environment's release holds (version, the archive's source, its
// sha256); a process alone places the tenant like its own compose file does; the processes are
// part of the spec hash, so a new version is a new desired state; an artifact used as the other
// kind, or not promoted yet, is PROMOTION_PENDING with why. Pure: desiredForTenant, the rules.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { EnvironmentSpecSchema, EnvironmentStatusSchema, type Release } from "../gen/skipper/v1/delivery_pb.js";
import { ConvergenceStatus, ResourceSchema, TenantSpecSchema, type Resource } from "../gen/skipper/v1/resource_pb.js";
import { desiredForTenant } from "../controller/reconcile/desired-targets.js";
import type { EnvironmentView } from "../controller/delivery/resolve/tenant-environment.js";
import { checkTenantSpec } from "../controller/resources/resource-rules.js";
import { archiveReference, archiveSourceOf } from "../controller/domain/process-archive.js";
import type { SkipperError } from "../controller/base/errors.js";

const hex = (n: number) => String(n).repeat(64).slice(0, 64);
const TEMPLATE = "/srv/archives/agent-{version}.tar.gz";
const release = (id: string, ...versions: [string, string, number, string?][]): Release =>
  ({
    id,
    versions: versions.map(([artifactId, version, n, reference]) => ({
      artifactId,
      version,
      digest: `sha256:${hex(n)}`,
      reference: reference ?? archiveReference(TEMPLATE, version),
    })),
  }) as Release;
const env = (current?: Release, artifactIds = ["agent"]): EnvironmentView => ({
  id: "test",
  spec: create(EnvironmentSpecSchema, { deliveryId: "d", artifactIds, tenantIds: ["edge"] }),
  status: create(EnvironmentStatusSchema, { current, message: "waiting for a version" }),
});
const fromArtifact = { artifactId: "agent", spec: { module: "agent", argv: ["bin/agent", "--port", "8080"], env: { MODE: "edge" } } };
function tenant(spec: Record<string, unknown>): Resource {
  return create(ResourceSchema, {
    id: "edge",
    resourceType: "tenant",
    desiredState: { kind: { case: "tenant", value: { deploymentPolicy: { nodeSelector: { role: "edge" } }, ...spec } } } as never,
  });
}
const node = (id: string, role: string) =>
  create(ResourceSchema, { id, resourceType: "node", metadata: { labels: { role } }, desiredState: { kind: { case: "node", value: {} } } });
const nodes = [node("n1", "edge"), node("n2", "edge"), node("n3", "core")];
const world = (t: Resource, environments: EnvironmentView[], services: Resource[] = []) => ({
  tenant: t,
  services,
  networks: new Map(),
  volumes: new Map(),
  limits: new Map(),
  nodes,
  environments,
});

describe("a tenant's processes", () => {
  it("alone: on every node the policy selects, with no compose file, the release's version pinned by sha256", () => {
    const d = desiredForTenant(world(tenant({ processes: [fromArtifact] }), [env(release("r1", ["agent", "1.0.0", 1]))]));
    expect(d.blocker).toBeUndefined();
    expect([...d.targets.keys()].sort()).toEqual(["n1", "n2"]);
    const p = d.targets.get("n1")!;
    expect(p.project.composeFile).toBe("");
    expect(p.processes).toHaveLength(1);
    expect(p.processes[0]).toMatchObject({
      module: "agent",
      version: "1.0.0",
      sha256: hex(1),
      source: { kind: { case: "path", value: "/srv/archives/agent-1.0.0.tar.gz" } },
      argv: ["bin/agent", "--port", "8080"],
      env: { MODE: "edge" },
    });
    expect(d.release).toEqual({ environmentId: "test", releaseId: "r1" });
    // Another release: another desired state (hash), the same one again: the same hash.
    const next = desiredForTenant(world(tenant({ processes: [fromArtifact] }), [env(release("r2", ["agent", "1.1.0", 2]))]));
    expect(next.targets.get("n1")!.specHash).not.toBe(p.specHash);
    expect(next.targets.get("n1")!.processes[0]!.version).toBe("1.1.0");
    const again = desiredForTenant(world(tenant({ processes: [fromArtifact] }), [env(release("r1", ["agent", "1.0.0", 1]))]));
    expect(again.targets.get("n1")!.specHash).toBe(p.specHash);
  });

  it("beside a compose file: every project carries them, and a tenant without processes hashes as before", () => {
    const compose = { composeFile: "services:\n  web:\n    image: busybox\n" };
    const plain = desiredForTenant(world(tenant({ compose }), [])).targets.get("n1")!;
    const both = desiredForTenant(world(tenant({ compose, processes: [fromArtifact] }), [env(release("r1", ["agent", "1.0.0", 1]))]));
    const p = both.targets.get("n1")!;
    expect(p.project.composeFile).toBe(compose.composeFile);
    expect(p.processes.map((x) => `${x.module} ${x.version}`)).toEqual(["agent 1.0.0"]);
    expect(p.specHash).not.toBe(plain.specHash);
    expect(plain.processes).toEqual([]);
  });

  it("waits with the reason until its environment promotes a version, and refuses an image as a process", () => {
    const none = desiredForTenant(world(tenant({ processes: [fromArtifact] }), [env(undefined)]));
    expect(none.targets.size).toBe(0);
    expect(none.blocker?.status).toBe(ConvergenceStatus.PROMOTION_PENDING);
    expect(none.blocker?.message).toContain("environment test has promoted no release of it yet (waiting for a version)");
    const image = release("r1", ["agent", "1.0.0", 1, `127.0.0.1:5000/agent@sha256:${hex(1)}`]);
    const wrong = desiredForTenant(world(tenant({ processes: [fromArtifact] }), [env(image)]));
    expect(wrong.targets.size).toBe(0);
    expect(wrong.blocker?.message).toBe("artifact agent is a container image: a tenant process needs a process_archive artifact");
    // And the other way round: an archive named as a compose service's image is never rendered.
    const asImage = desiredForTenant(
      world(tenant({ compose: { composeFile: "services:\n  web:\n    image: x\n", artifactImages: { web: "agent" } } }), [
        env(release("r1", ["agent", "1.0.0", 1])),
      ]),
    );
    expect(asImage.targets.size).toBe(0);
    expect(asImage.blocker?.message).toContain("artifact agent is a process archive");
  });

  it("a process with its own spec needs no environment", () => {
    const own = {
      spec: {
        module: "tool",
        version: "2.0.0",
        sha256: hex(3),
        source: { kind: { case: "url", value: "https://files.example/tool-2.0.0.tar.gz" } },
        argv: ["bin/tool"],
      },
    };
    const d = desiredForTenant(world(tenant({ processes: [own] }), []));
    expect(d.targets.get("n2")!.processes[0]).toMatchObject({ module: "tool", version: "2.0.0" });
    expect(d.release).toBeUndefined();
  });
});

describe("the rules of a tenant's processes", () => {
  const refusal = (processes: unknown[]): string => {
    try {
      checkTenantSpec(create(TenantSpecSchema, { processes } as never));
      return "accepted";
    } catch (e) {
      return (e as SkipperError).details?.field as string;
    }
  };
  it("names the field of what is wrong", () => {
    expect(refusal([fromArtifact])).toBe("accepted");
    expect(refusal([{ artifactId: "agent", spec: { ...fromArtifact.spec, version: "1.0.0" } }])).toBe(
      "desired_state.tenant.processes[0].spec",
    );
    expect(refusal([{ spec: { module: "tool", argv: ["bin/tool"] } }])).toBe("desired_state.tenant.processes[0].spec.version");
    expect(refusal([{ artifactId: "agent", spec: { module: "agent", argv: ["/bin/sh"] } }])).toBe(
      "desired_state.tenant.processes[0].spec.argv",
    );
    expect(refusal([fromArtifact, { artifactId: "other", spec: { module: "agent", argv: ["bin/x"] } }])).toBe(
      "desired_state.tenant.processes[1].spec.module",
    );
    expect(refusal([{ artifactId: "agent", spec: { module: "agent", argv: ["bin/a"], env: { DB_PASSWORD: "x" } } }])).toBe(
      "desired_state.tenant.processes[0].spec.env.DB_PASSWORD",
    );
  });
  it("a release reference says which kind of artifact it is", () => {
    expect(archiveSourceOf("/srv/a-1.tar.gz")?.kind).toEqual({ case: "path", value: "/srv/a-1.tar.gz" });
    expect(archiveSourceOf("https://f.example/a-1.tar.gz")?.kind.case).toBe("url");
    expect(archiveSourceOf(`127.0.0.1:5000/a@sha256:${hex(1)}`)).toBeUndefined();
  });
});
