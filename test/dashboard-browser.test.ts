// The dashboard in a real browser (Debian's chromium, driven by playwright-core) against a real
// controller and agent as processes on a real Docker engine. A viewer signs in with an API key;
// the fleet page shows the node online and the tenant converged; the tenant page shows desired and
// applied per node, the explain chain, its orders and events; a change made through the API shows
// up without a reload; the node page shows the containers it runs. Screenshots go to
// test-artifacts/dashboard/. Also: what the page may load (CSP) and that no path leaves the bundle.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import {
  RUN_ID,
  freePort,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  type AgentProcess,
  type ControllerProcess,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";
import { rawRequest } from "./helpers/https.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const CHROMIUM = process.env.SKIPPER_TEST_CHROMIUM ?? "/usr/bin/chromium";
const haveBrowser = existsSync(CHROMIUM);
if (!dockerHost || !haveBrowser)
  console.warn(`!!! dashboard-browser.test.ts SKIPPED: needs a Docker engine and ${CHROMIUM} (apt-get install chromium)`);

const NODE = "ui-node";
const TENANT = `ui-shop-${RUN_ID}`;
const IMAGE = "skipper-busybox:local";
const SHOTS = join(process.cwd(), "test-artifacts", "dashboard");

describe.skipIf(!dockerHost || !haveBrowser)("the dashboard (real browser, controller, agent and engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let browser: Browser;
  let page: Page;
  let root: string;
  let port: number;
  let viewerKey: string;
  const api = () => ctl.admin(ResourceService);
  const rows = (testId: string) => page.locator(`[data-testid=${testId}] tbody tr`);

  beforeAll(async () => {
    // The bundle the controller serves, built from the sources under test.
    await execa(process.execPath, ["scripts/build-ui.mjs"]);
    await mkdir(SHOTS, { recursive: true });
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-ui-"));
    port = await freePort();
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--reconcile-interval", "2s"] });
    const token = (await ctl.admin(NodeService).registerNode({ nodeId: NODE, labels: { region: "eu" } })).token;
    agent = startAgentProcess({
      controller: ctl,
      nodeId: NODE,
      token,
      stateDir: join(root, "state"),
      workDir: join(root, "work"),
      dockerHost: dockerHost!,
      extraArgs: ["--ready-timeout", "30s"],
    });
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", TENANT, { case: "tenant", value: { deploymentPolicy: { targetNodeId: NODE } } }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "ui-web", {
        case: "service",
        value: {
          tenantId: TENANT,
          image: IMAGE,
          command: [
            "sh",
            "-c",
            'mkdir -p /www && echo "$GREETING" > /www/index.html && httpd -f -p 8080 -h /www & trap "exit 0" TERM; wait',
          ],
          env: { GREETING: "v1" },
          ports: [{ hostIp: "127.0.0.1", hostPort: port, containerPort: 8080 }],
        },
      }),
    });
    await tenantConverged(api(), TENANT, 120_000);
    viewerKey = (await ctl.admin(AccessService).createApiKey({ name: "dashboard-viewer", role: Role.VIEWER })).secret;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    // The controller's certificate is signed by its own CA, which this browser does not know.
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    await agent?.stop();
    await ctl?.stop();
    if (dockerHost) await removeComposeProject(dockerHost, TENANT);
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  it("refuses a wrong credential on the sign-in form, then signs a viewer in to the fleet page", async () => {
    await page.goto(`${ctl.url}/`);
    expect(new URL(page.url()).pathname).toBe("/ui/");
    await page.fill("#credential", "skk_000000000000_not-a-real-key-not-a-real-key-not-a-real-k");
    await page.click("form.sign-in button[type=submit]");
    await expect(page.locator("form.sign-in [role=alert]").textContent()).resolves.toMatch(/refused/);

    await page.fill("#credential", viewerKey);
    await page.click("form.sign-in button[type=submit]");
    await rows("nodes").filter({ hasText: NODE }).filter({ hasText: "ONLINE" }).waitFor();
    await rows("tenants").filter({ hasText: TENANT }).filter({ hasText: "CONVERGED" }).waitFor();
    expect(await rows("nodes").filter({ hasText: NODE }).textContent()).toContain("region=eu");
    await expect(page.locator("#who").textContent()).resolves.toContain("dashboard-viewer");
    await page.locator("#live.on").waitFor();
    await page.screenshot({ path: join(SHOTS, "fleet.png"), fullPage: true });
  }, 60_000);

  it("shows a tenant's targets, explain chain, orders and events, and a change made through the API without a reload", async () => {
    await page.click(`a[href="#/tenants/${TENANT}"]`);
    await rows("targets").filter({ hasText: NODE }).filter({ hasText: "CONVERGED" }).waitFor();
    expect(await page.locator("[data-testid=explain] li").count()).toBeGreaterThan(0);
    await rows("orders").filter({ hasText: "DEPLOY_SERVICE" }).filter({ hasText: "SUCCESS" }).first().waitFor();
    expect(await rows("events").count()).toBeGreaterThan(0);
    await page.screenshot({ path: join(SHOTS, "tenant.png"), fullPage: true });
    const before = await rows("orders").filter({ hasText: "DEPLOY_SERVICE" }).count();

    // Through the API, while the page stays as it is.
    const svc = (await api().getResource({ resourceType: "service", id: "ui-web" })).resource!;
    if (svc.desiredState?.kind.case !== "service") throw new Error("not a service");
    svc.desiredState.kind.value.env = { GREETING: "v2" };
    await api().updateResource({ resourceType: "service", id: "ui-web", desiredState: svc.desiredState });
    await expect.poll(() => rows("orders").count(), { timeout: 60_000 }).toBeGreaterThan(before);
    await rows("orders").filter({ hasText: "SUCCESS" }).nth(before).waitFor({ timeout: 90_000 });
    await rows("targets").filter({ hasText: "CONVERGED" }).waitFor({ timeout: 90_000 });
    await page.screenshot({ path: join(SHOTS, "tenant-after-change.png"), fullPage: true });
  }, 180_000);

  it("shows a node's projects and containers", async () => {
    await page.click(`a[href="#/nodes/${NODE}"]`);
    await rows("projects").filter({ hasText: TENANT }).filter({ hasText: "running" }).waitFor({ timeout: 60_000 });
    expect(await page.locator("h1").textContent()).toContain("ONLINE");
    await page.screenshot({ path: join(SHOTS, "node.png"), fullPage: true });
  }, 90_000);

  it("serves only the bundle's files, under a policy that loads nothing from elsewhere", async () => {
    const index = await rawRequest(ctl, "GET", "/ui/");
    expect(index.status).toBe(200);
    expect(String(index.headers["content-security-policy"])).toContain("default-src 'none'");
    expect(String(index.headers["content-security-policy"])).toContain("connect-src 'self'");
    expect(index.body).not.toMatch(/https?:\/\//);
    for (const path of ["/ui/..%2f..%2fpackage.json", "/ui/../package.json", "/ui/%2e%2e/package.json", "/ui/%E0%A4%A"]) {
      const r = await rawRequest(ctl, "GET", path);
      expect(r.status, path).toBe(404);
      expect(r.body).not.toContain('"name"');
    }
  });
});
