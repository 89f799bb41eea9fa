// Registry watching end to end (issue 34): the built controller as a process, one skippy agent on a
// real engine, images pushed to a private registry on loopback (Debian's docker-registry with
// htpasswd). The artifact `web` is watched every 2 s for tags in "^1.0.0", with its tenant's
// registry secret; one environment without constraints holds the tenant, whose service names the
// artifact. Nothing is posted: every version comes from the watch. Every wait is for state the
// controller or the engine reports; nothing waits a fixed time.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ArtifactStatus, VersionOrigin } from "../gen/skipper/v1/delivery_pb.js";
import { DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { EventService } from "../gen/skipper/v1/event_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ConvergenceStatus } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import {
  type AgentProcess,
  type ControllerProcess,
  RUN_ID,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  waitFor,
} from "./helpers/processes.js";
import { registryInstalled, startRegistry, type TestRegistry, versionImage } from "./helpers/registry.js";
import { res } from "./helpers/resources.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const ready = !!dockerHost && (await registryInstalled());
if (!ready) console.warn("!!! registry-watch-e2e.test.ts SKIPPED: needs a Docker engine and docker-registry/htpasswd");

const TENANT = `rw-${RUN_ID}`;
const REPO = `shop/rw-${RUN_ID}`;
const INTERVAL_MS = 2000;

describe.skipIf(!ready)("registry watching (real registry, real engine)", () => {
  let ctl: ControllerProcess;
  let registry: TestRegistry;
  let agent: AgentProcess;
  let root: string;
  const digests = new Map<string, string>();
  const api = () => ctl.admin(ResourceService);
  const delivery = () => ctl.admin(DeliveryService);

  async function versions() {
    return (await delivery().listArtifactVersions({ artifactId: "web", includeBad: true, pageSize: 1000 })).versions.flatMap((r) =>
      r.desiredState?.kind.case === "artifactVersion" ? [r.desiredState.kind.value] : [],
    );
  }
  async function artifactStatus(): Promise<ArtifactStatus | undefined> {
    const r = (await api().getResource({ resourceType: "artifact", id: "web" })).resource;
    return r?.currentState?.kind.case === "artifact" ? r.currentState.kind.value : undefined;
  }
  const recorded = (version: string) =>
    waitFor(`web ${version} to be recorded`, async () => (await versions()).find((v) => v.version === version), 30_000, 100);

  // An image whose /www/version holds `content`, pushed as `tag`; answers the digest the registry serves.
  async function push(tag: string, content = tag): Promise<{ digest: string; pushedAt: number }> {
    await versionImage(dockerHost!, `rw-web-${RUN_ID}:${tag}`, content);
    await registry.push(`rw-web-${RUN_ID}:${tag}`, `${REPO}:${tag}`);
    const pushedAt = Date.now();
    return { digest: await registry.digest(REPO, tag), pushedAt };
  }

  // The image digest the tenant's web container runs.
  async function runningDigest(): Promise<string | undefined> {
    const env = { DOCKER_HOST: dockerHost! };
    const ps = ["ps", "-q", "--filter", `label=com.docker.compose.project=${TENANT}`, "--filter", "label=com.docker.compose.service=web"];
    const ids = (await execa("docker", ps, { env })).stdout.trim();
    if (ids === "") return undefined;
    const image = (await execa("docker", ["inspect", "--format", "{{.Config.Image}}", ids.split("\n")[0]!], { env })).stdout.trim();
    return image.slice(image.indexOf("@") + 1);
  }
  const runs = (version: string) =>
    waitFor(
      `${TENANT} to run web ${version}`,
      async () => {
        const t = (await api().getResource({ resourceType: "tenant", id: TENANT })).resource;
        return t?.convergence?.status === ConvergenceStatus.CONVERGED && (await runningDigest()) === digests.get(version)
          ? true
          : undefined;
      },
      60_000,
    );
  const secret = (password: string) => ({
    kind: { case: "secret", value: { tenantId: TENANT, registry: registry.host, values: { username: registry.username, password } } },
  });

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-regwatch-"));
    registry = await startRegistry(dockerHost!, "watcher", `sntl-rw-pass-${RUN_ID}`);
    ctl = await startControllerProcess({
      dataDir: join(root, "data"),
      extraArgs: ["--reconcile-interval", "2s", "--promotion-interval", "1s"],
    });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: "rw-node", labels: { tier: "rw" } })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: "rw-node",
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "30s"],
      env: { HOME: join(root, "home") },
    });
    const create = (type: string, id: string, value: object) =>
      api().createResource({ resourceType: type, resource: res(type, id, { case: type, value }) });
    await create("tenant", TENANT, { deploymentPolicy: { nodeSelector: { tier: "rw" } } });
    await create("secret", `${TENANT}-registry`, secret(registry.password).kind.value);
    await create("artifact", "web", {
      tenantId: TENANT,
      source: { case: "image", value: { repository: `${registry.host}/${REPO}`, registrySecretId: `${TENANT}-registry` } },
      watch: { interval: durationFromMs(INTERVAL_MS), filter: { case: "semverRange", value: "^1.0.0" } },
    });
    await create("service", `${TENANT}-web`, {
      tenantId: TENANT,
      artifactId: "web",
      composeService: "web",
      command: ["httpd", "-f", "-p", "8080", "-h", "/www"],
    });
    await create("delivery", "shop", { displayName: "Shop" });
    await create("environment", "live", { deliveryId: "shop", tenantIds: [TENANT], artifactIds: ["web"] });
  }, 120_000);

  afterAll(async () => {
    await agent?.stop();
    await ctl?.stop();
    await registry?.stop();
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("1.0.0 pushed: recorded as DISCOVERED within an interval or so, and the tenant runs it", async () => {
    const { digest, pushedAt } = await push("1.0.0");
    digests.set("1.0.0", digest);
    const v = await recorded("1.0.0");
    const seenAfter = Date.now() - pushedAt;
    expect(v.origin).toBe(VersionOrigin.DISCOVERED);
    expect(v.digest).toBe(digest);
    // One interval, plus the look itself and this test's polling.
    expect(seenAfter).toBeLessThan(INTERVAL_MS + 2000);
    await runs("1.0.0");
    const status = await waitFor("the artifact's status to name 1.0.0", async () => {
      const s = await artifactStatus();
      return s?.latestVersion === "1.0.0" ? s : undefined;
    });
    expect(status.versions).toBe(1);
    expect(status.watchError).toBe("");
    expect(status.watchedAt).toBeDefined();
  });

  it("1.2.0-rc.1 is not in ^1.0.0 and is never recorded; 1.1.0 pushed after it is", async () => {
    await push("1.2.0-rc.1");
    const { digest } = await push("1.1.0");
    digests.set("1.1.0", digest);
    const v = await recorded("1.1.0");
    expect(v.origin).toBe(VersionOrigin.DISCOVERED);
    // The rc was pushed first: every look since listed it and left it out.
    expect((await versions()).map((x) => x.version).sort()).toEqual(["1.0.0", "1.1.0"]);
    await runs("1.1.0");
  });

  it("a wrong password: watch_error names the registry and repository, never the password; the right one again clears it", async () => {
    const wrong = `wrong-${RUN_ID}-password`;
    await api().updateResource({ resourceType: "secret", id: `${TENANT}-registry`, desiredState: secret(wrong) as never });
    const failed = await waitFor("the watch to fail", async () => {
      const s = await artifactStatus();
      return s?.watchError ? s : undefined;
    });
    expect(failed.watchError).toContain(registry.host);
    expect(failed.watchError).toContain(REPO);
    expect(failed.watchError).not.toContain(wrong);
    expect(failed.watchError).not.toContain(registry.password);
    const events = (await ctl.admin(EventService).listEvents({ resourceId: "web", pageSize: 1000 })).events;
    expect(JSON.stringify(events.map((e) => e.data))).not.toContain(wrong);
    await api().updateResource({ resourceType: "secret", id: `${TENANT}-registry`, desiredState: secret(registry.password) as never });
    await waitFor("the watch to succeed again", async () => ((await artifactStatus())?.watchError === "" ? true : undefined));
  });

  it("1.0.0 pushed again with other content: delivery_tag_moved once, and the version keeps its digest", async () => {
    const { digest: moved } = await push("1.0.0", "1.0.0-again");
    expect(moved).not.toBe(digests.get("1.0.0"));
    const status = await waitFor("the status to list 1.0.0 as moved", async () => {
      const s = await artifactStatus();
      return s?.movedTags.includes("1.0.0") ? s : undefined;
    });
    expect(status.movedTags).toEqual(["1.0.0"]);
    const events = await waitFor("the tag-moved event", async () => {
      const e = (await ctl.admin(EventService).listEvents({ resourceId: "web", type: "delivery_tag_moved" })).events;
      return e.length > 0 ? e : undefined;
    });
    expect(events).toHaveLength(1);
    expect(events[0]!.data).toMatchObject({ tag: "1.0.0", recorded_digest: digests.get("1.0.0"), registry_digest: moved });
    const v = (await versions()).find((x) => x.version === "1.0.0")!;
    expect(v.digest).toBe(digests.get("1.0.0"));
    expect((await versions()).length).toBe(2);
  });
});
