// The dashboard in a real browser (Debian's chromium, driven by playwright-core) against a real
// controller and agent as processes on a real Docker engine. A viewer signs in with an API key;
// the fleet page shows the node online and the tenant converged; the tenant page shows desired and
// applied per node, the explain chain, its orders and events; a change made through the API shows
// up without a reload; the node page shows the containers it runs. The tenant page's logs view:
// a viewer is shown the API's refusal; an operator sees what a container printed, per node with
// timestamps, is told plainly when a service printed nothing, sees a line printed after Follow
// started without a reload, and is told when the node is offline. Screenshots go to
// test-artifacts/dashboard/. Also: what the page may load (CSP) and that no path leaves the bundle.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { Role } from "../gen/skipper/v1/access_pb.js";
import type { Locator, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { NodeService } from "../gen/skipper/v1/node_service_pb.js";
import { NodeLiveness } from "../gen/skipper/v1/resource_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { WorkOrderService } from "../gen/skipper/v1/work_order_service_pb.js";
import {
  RUN_ID,
  freePort,
  removeComposeProject,
  startAgentProcess,
  startControllerProcess,
  type AgentProcess,
  type ControllerProcess,
  waitFor,
} from "./helpers/processes.js";
import { res, tenantConverged } from "./helpers/resources.js";
import { gotoSettled, launchChromium, type TestBrowser } from "./helpers/browser.js";
import { rawRequest } from "./helpers/https.js";
import { AGENT_VERSION } from "../agent/agent-version.js";

const dockerHost = process.env.SKIPPER_TEST_DOCKER_HOST;
const CHROMIUM = process.env.SKIPPER_TEST_CHROMIUM ?? "/usr/bin/chromium";
const haveBrowser = existsSync(CHROMIUM);
if (!dockerHost || !haveBrowser)
  console.warn(`!!! dashboard-browser.test.ts SKIPPED: needs a Docker engine and ${CHROMIUM} (apt-get install chromium)`);

const NODE = "ui-node";
const TENANT = `ui-shop-${RUN_ID}`;
const GHOST_NODE = "ui-ghost";
const GHOST_TENANT = `ui-ghost-shop-${RUN_ID}`;
const IMAGE = "skipper-busybox:local";
const SHOTS = join(process.cwd(), "test-artifacts", "dashboard");
/** What the logs view's container prints at start, and the line the test has it print while followed. */
const TALKER_SAYS = `talker says hello ${RUN_ID}`;
const TALKER_WARNS = `talker warns ${RUN_ID}`;
const PRINTED_LATER = `printed after follow started ${RUN_ID}`;

describe.skipIf(!dockerHost || !haveBrowser)("the dashboard (real browser, controller, agent and engine)", () => {
  let ctl: ControllerProcess;
  let agent: AgentProcess;
  let browser: TestBrowser;
  let page: Page;
  let root: string;
  let port: number;
  let viewerKey: string;
  let operatorKey: string;
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
    // The logs view's subject: a container that prints known lines, one of them on stderr.
    await api().createResource({
      resourceType: "service",
      resource: res("service", "ui-talker", {
        case: "service",
        value: {
          tenantId: TENANT,
          image: IMAGE,
          command: ["sh", "-c", `echo "${TALKER_SAYS}"; echo "${TALKER_WARNS}" >&2; trap "exit 0" TERM; sleep 3600 & wait`],
        },
      }),
    });
    // A tenant placed on a node whose agent never started: its logs view must not wait for it.
    await ctl.admin(NodeService).registerNode({ nodeId: GHOST_NODE });
    await api().createResource({
      resourceType: "tenant",
      resource: res("tenant", GHOST_TENANT, { case: "tenant", value: { deploymentPolicy: { targetNodeId: GHOST_NODE } } }),
    });
    await api().createResource({
      resourceType: "service",
      resource: res("service", "ghost-web", {
        case: "service",
        value: { tenantId: GHOST_TENANT, image: IMAGE, command: ["sleep", "3600"] },
      }),
    });
    await tenantConverged(api(), TENANT, 120_000);
    operatorKey = (await ctl.admin(AccessService).createApiKey({ name: "dashboard-operator", role: Role.OPERATOR })).secret;
    viewerKey = (await ctl.admin(AccessService).createApiKey({ name: "dashboard-viewer", role: Role.VIEWER })).secret;
    // In a network namespace of its own, reaching only the controller's port (helpers/browser.ts).
    browser = await launchChromium(CHROMIUM, [Number(new URL(ctl.url).port)]);
    // The controller's certificate is signed by its own CA, which this browser does not know.
    const context = await browser.browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
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
    await gotoSettled(page, `${ctl.url}/`);
    expect(new URL(page.url()).pathname).toBe("/ui/");
    await page.fill("#credential", "skk_000000000000_not-a-real-key-not-a-real-key-not-a-real-k");
    await page.click("form.sign-in button[type=submit]");
    await expect(page.locator("form.sign-in [role=alert]").textContent()).resolves.toMatch(/refused/);

    await page.fill("#credential", viewerKey);
    await page.click("form.sign-in button[type=submit]");
    await rows("nodes").filter({ hasText: NODE }).filter({ hasText: "ONLINE" }).waitFor();
    await rows("tenants").filter({ hasText: TENANT }).filter({ hasText: "CONVERGED" }).waitFor();
    expect(await rows("nodes").filter({ hasText: NODE }).textContent()).toContain("region=eu");
    // The agent's version, in its row and in the fleet's count of versions.
    expect(await rows("nodes").filter({ hasText: NODE }).textContent()).toContain(AGENT_VERSION);
    expect(await page.locator("[data-agent-versions]").textContent()).toMatch(
      new RegExp(`Agent versions: .*${AGENT_VERSION.replaceAll(".", "\\.")} × \\d`),
    );
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
    const succeeded = await rows("orders").filter({ hasText: "DEPLOY_SERVICE" }).filter({ hasText: "SUCCESS" }).count();

    // Through the API, while the page stays as it is.
    const svc = (await api().getResource({ resourceType: "service", id: "ui-web" })).resource!;
    if (svc.desiredState?.kind.case !== "service") throw new Error("not a service");
    svc.desiredState.kind.value.env = { GREETING: "v2" };
    await api().updateResource({ resourceType: "service", id: "ui-web", desiredState: svc.desiredState });
    await expect.poll(() => rows("orders").count(), { timeout: 60_000 }).toBeGreaterThan(before);
    // One more deploy succeeds (the tenant's first deploy may have been superseded by its second service's).
    await rows("orders").filter({ hasText: "DEPLOY_SERVICE" }).filter({ hasText: "SUCCESS" }).nth(succeeded).waitFor({ timeout: 90_000 });
    await rows("targets").filter({ hasText: "CONVERGED" }).waitFor({ timeout: 90_000 });
    await page.screenshot({ path: join(SHOTS, "tenant-after-change.png"), fullPage: true });
  }, 180_000);

  it("shows a node's projects and containers", async () => {
    await page.click(`a[href="#/nodes/${NODE}"]`);
    await rows("projects")
      .filter({ hasText: TENANT })
      .filter({ hasText: "ui-web" })
      .filter({ hasText: "running" })
      .waitFor({ timeout: 60_000 });
    expect(await page.locator("h1").textContent()).toContain("ONLINE");
    await page.screenshot({ path: join(SHOTS, "node.png"), fullPage: true });
  }, 90_000);

  const logs = (what: string) => page.locator(`[data-testid=logs] [data-testid=${what}]`);
  const nodeBox = () => page.locator(`[data-testid=logs] [data-log-node="${NODE}"]`);

  it("shows a viewer who asks for logs the API's refusal", async () => {
    await page.click(`a[href="#/tenants/${TENANT}"]`);
    await logs("logs-services").locator("label", { hasText: "ui-talker" }).waitFor();
    await logs("logs-fetch").click();
    const refusal = await logs("logs-alert").filter({ hasText: "FORBIDDEN" }).textContent();
    expect(refusal).toMatch(/^FORBIDDEN: .+operator role/);
    // The node's box says it was not read, not "asking…" under the refusal.
    await nodeBox().locator("p.error", { hasText: "Not read: FORBIDDEN" }).waitFor({ timeout: 10_000 });
    expect(await nodeBox().textContent()).not.toContain("asking…");
    await page.screenshot({ path: join(SHOTS, "logs-forbidden.png"), fullPage: true });
  }, 60_000);

  it("shows an operator each node's lines with their times, and says so when a service printed none", async () => {
    await page.click("#sign-out");
    await page.fill("#credential", operatorKey);
    await page.click("form.sign-in button[type=submit]");
    // Signed in again on the page the address names: the tenant's.
    await page.locator("#who", { hasText: "dashboard-operator" }).waitFor();
    const pick = (service: string) => logs("logs-services").locator("label", { hasText: service }).locator("input");
    await tick(pick("ui-web"), true);
    await logs("logs-fetch").click();
    await nodeBox().locator("p", { hasText: "No log lines from ui-web" }).waitFor();
    await logs("logs-status").filter({ hasText: "Fetched at" }).waitFor();

    await tick(pick("ui-web"), false);
    await tick(pick("ui-talker"), true);
    await logs("logs-fetch").click();
    const said = nodeBox().locator("tr", { hasText: TALKER_SAYS });
    await said.waitFor();
    expect(await said.locator(".log-time").textContent()).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(await said.locator(".log-container").textContent()).toContain("ui-talker");
    await nodeBox().locator("tr.stderr", { hasText: TALKER_WARNS }).waitFor();
    expect(await nodeBox().locator("p").textContent()).toMatch(/^2 line\(s\) from ui-talker/);
  }, 90_000);

  it("follows: a line the container prints after Follow started appears without a reload, until Stop", async () => {
    await page.evaluate(() => Object.assign(globalThis, { sameDocument: true }));
    await logs("logs-follow").click();
    // The first round is on the page: what follows is new.
    await logs("logs-status").filter({ hasText: "Following" }).waitFor();
    await nodeBox().locator("tr", { hasText: TALKER_SAYS }).waitFor();
    await printInContainer("ui-talker", PRINTED_LATER);
    await nodeBox().locator("tr", { hasText: PRINTED_LATER }).waitFor({ timeout: 30_000 });
    // Each line once: the lines shown before were not repeated by the rounds after them.
    expect(await nodeBox().locator("tr", { hasText: TALKER_SAYS }).count()).toBe(1);
    expect(await page.evaluate(() => "sameDocument" in globalThis)).toBe(true);
    await page.screenshot({ path: join(SHOTS, "logs-follow.png"), fullPage: true });
    await logs("logs-follow").click();
    await logs("logs-status").filter({ hasText: "Stopped." }).waitFor();
    expect(await logs("logs-follow").textContent()).toBe("Follow");
  }, 90_000);

  it("stops following when the page is left", async () => {
    await logs("logs-follow").click();
    await logs("logs-status").filter({ hasText: "Following" }).waitFor();
    // The view's status line, held on to as the page is left (it is no longer in the document then).
    const statusLine = await logs("logs-status").elementHandle();
    await page.click('a[href="#/"]');
    await rows("tenants").filter({ hasText: TENANT }).waitFor();
    await page.waitForFunction((el) => el?.textContent === "Stopped.", statusLine);
    // Back on the tenant's page: a new view, idle.
    await page.click(`a[href="#/tenants/${TENANT}"]`);
    await logs("logs-status").filter({ hasText: "then Fetch or Follow" }).waitFor();
  }, 60_000);

  it("says a node is offline instead of asking it", async () => {
    await agent.stop();
    await waitFor("the node to be offline", async () => {
      const n = (await api().getResource({ resourceType: "node", id: NODE })).resource!;
      return n.currentState?.kind.case === "node" && n.currentState.kind.value.liveness === NodeLiveness.OFFLINE ? true : undefined;
    });
    await logs("logs-fetch").click();
    await nodeBox()
      .locator("p.error", { hasText: `${NODE} is offline` })
      .waitFor();
    await page.screenshot({ path: join(SHOTS, "logs-offline.png"), fullPage: true });
  }, 90_000);

  it("says a node whose agent never reported is offline, without asking it", async () => {
    await page.click('a[href="#/"]');
    // Named as the CLI names it (common/node-liveness-name.ts), not by the enum's UNSPECIFIED.
    expect(await rows("nodes").filter({ hasText: GHOST_NODE }).textContent()).toContain("NEVER_SEEN");
    await page.click(`a[href="#/tenants/${GHOST_TENANT}"]`);
    await logs("logs-fetch").click();
    const box = page.locator(`[data-testid=logs] [data-log-node="${GHOST_NODE}"]`);
    await box.locator("p.error", { hasText: `${GHOST_NODE} is offline (its agent has never sent a heartbeat)` }).waitFor();
    // Nothing was asked of it: no read_logs order waits for the node.
    const orders = await ctl.admin(WorkOrderService).listWorkOrders({ nodeId: GHOST_NODE });
    expect(orders.workOrders.filter((o) => o.type === WorkOrderType.READ_LOGS)).toEqual([]);
  }, 60_000);

  it("lists a fleet of more than one page of nodes in full", async () => {
    // 1,000 more nodes: with the two above, past the API's largest page (1,000).
    const nodes = ctl.admin(NodeService);
    const ids = Array.from({ length: 1000 }, (_, i) => `fleet-${String(i).padStart(4, "0")}`);
    for (let i = 0; i < ids.length; i += 50) await Promise.all(ids.slice(i, i + 50).map((nodeId) => nodes.registerNode({ nodeId })));
    await page.click('a[href="#/"]');
    // An event arrived with each node, so the page draws itself again without a reload.
    await page.locator("h2", { hasText: "Nodes (1002)" }).waitFor({ timeout: 60_000 });
    expect(await rows("nodes").count()).toBe(1002);
    // The nodes listed last, in id order after every fleet-NNNN, come from the second page.
    expect(await rows("nodes").filter({ hasText: NODE }).count()).toBe(1);
    expect(await rows("nodes").filter({ hasText: GHOST_NODE }).count()).toBe(1);
    expect(await rows("nodes").filter({ hasText: "fleet-0999" }).count()).toBe(1);
  }, 120_000);

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

/**
 * Ticks or unticks a checkbox, again if the click was lost: the page draws itself anew on every
 * event in the fleet, and a click aimed just before such a redraw may land beside the box.
 */
async function tick(box: Locator, on: boolean): Promise<void> {
  await vi.waitFor(() => box.setChecked(on, { timeout: 5_000 }), { timeout: 30_000, interval: 100 });
}

/** Has the service's container print a line on its output, as its own process would. */
async function printInContainer(service: string, line: string): Promise<void> {
  const env = { DOCKER_HOST: dockerHost! };
  const filters = ["--filter", `label=com.docker.compose.project=${TENANT}`, "--filter", `label=com.docker.compose.service=${service}`];
  const id = (await execa("docker", ["ps", "-q", ...filters], { env })).stdout.trim();
  expect(id).not.toBe("");
  await execa("docker", ["exec", id, "sh", "-c", `echo "${line}" > /proc/1/fd/1`], { env });
}
