// The dashboard's delivery view in a real browser (Debian's chromium, driven by playwright-core)
// against a real controller process whose promotion loop moves the releases. The delivery has two
// environments, test then production (production requires approval); both select tenants by a
// label no tenant carries, so a release promoted there has no tenant to roll out to and counts as
// verified at once (the planner's rule for an environment with no tenants, environment-pass ->
// in-flight.ts): the states come from the real loop without agents or a registry. A viewer sees
// the matrix (states, reasons, a cell's constraints, each environment's message) and no buttons;
// an operator approves, pins, unpins and marks a version bad from the page, each observed through
// the API. Screenshots go to test-artifacts/dashboard/.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { DecisionKind, type EnvironmentStatus } from "../gen/skipper/v1/delivery_pb.js";
import { CellState, DeliveryService } from "../gen/skipper/v1/delivery_service_pb.js";
import { ResourceService } from "../gen/skipper/v1/resource_service_pb.js";
import { gotoSettled, launchChromium, type TestBrowser } from "./helpers/browser.js";
import { startControllerProcess, waitFor, type ControllerProcess } from "./helpers/processes.js";
import { res } from "./helpers/resources.js";

const CHROMIUM = process.env.SKIPPER_TEST_CHROMIUM ?? "/usr/bin/chromium";
const haveBrowser = existsSync(CHROMIUM);
if (!haveBrowser) console.warn(`!!! dashboard-delivery-browser.test.ts SKIPPED: needs ${CHROMIUM} (apt-get install chromium)`);

const SHOTS = join(process.cwd(), "test-artifacts", "dashboard");
const digest = (n: number) => `sha256:${n.toString(16).padStart(64, "0")}`;
const NOBODY = "skipper-ui-test=no-tenant";

describe.skipIf(!haveBrowser)("the dashboard's delivery view (real browser and controller)", () => {
  let ctl: ControllerProcess;
  let browser: TestBrowser;
  let page: Page;
  let root: string;
  let viewerKey: string;
  let operatorKey: string;
  const rel: Record<string, string> = {};
  const envStatus = async (id: string): Promise<EnvironmentStatus | undefined> => {
    const r = (await ctl.admin(ResourceService).getResource({ resourceType: "environment", id })).resource;
    return r?.currentState?.kind.case === "environment" ? r.currentState.kind.value : undefined;
  };
  const cell = (release: string, env: string) => page.locator(`[data-testid=matrix] tr[data-release="${release}"] td[data-env="${env}"]`);
  const buttons = () => page.locator("[data-testid=matrix] button");
  /** Answers the next reason prompt with `reason`. */
  const answer = (reason: string) => page.once("dialog", (d) => void d.accept(reason));

  beforeAll(async () => {
    await execa(process.execPath, ["scripts/build-ui.mjs"]);
    await mkdir(SHOTS, { recursive: true });
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-ui-delivery-"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--promotion-interval", "1s"] });
    const create = (type: string, id: string, value: object) =>
      ctl.admin(ResourceService).createResource({ resourceType: type, resource: res(type, id, { case: type, value }) });
    await create("tenant", "shop", {});
    await create("artifact", "web", { tenantId: "shop", source: { case: "image", value: { repository: "127.0.0.1:5000/shop/web" } } });
    await create("delivery", "shop", { displayName: "Shop" });
    await create("environment", "test", { deliveryId: "shop", tenantSelector: NOBODY, artifactIds: ["web"] });
    await create("environment", "production", {
      deliveryId: "shop",
      tenantSelector: NOBODY,
      artifactIds: ["web"],
      dependsOn: [{ environmentId: "test" }],
      requireApproval: true,
    });
    // CI posts two versions; the loop takes each into test, and production waits for approval.
    const d = ctl.admin(DeliveryService);
    for (const [version, n] of [
      ["1.0.0", 1],
      ["1.1.0", 2],
    ] as const) {
      await d.createArtifactVersion({ artifactId: "web", version, digest: digest(n) });
      const st = await waitFor(`test to run web ${version}`, async () => {
        const s = await envStatus("test");
        return s?.current?.versions[0]?.version === version && !s.inFlight ? s : undefined;
      });
      rel[version] = st.current!.id;
    }
    await waitFor("production to wait for approval of both", async () => {
      const m = (await d.getDeliveryStatus({ id: "shop" })).matrix!;
      const states = m.rows.map((r) => r.cells.map((c) => CellState[c.state]).join(" "));
      return states.join(", ") === "CURRENT WAITING, RAN_BEFORE WAITING" ? m : undefined;
    });
    const access = ctl.admin(AccessService);
    operatorKey = (await access.createApiKey({ name: "delivery-operator", role: Role.OPERATOR })).secret;
    viewerKey = (await access.createApiKey({ name: "delivery-viewer", role: Role.VIEWER })).secret;
    browser = await launchChromium(CHROMIUM, [Number(new URL(ctl.url).port)]);
    const context = await browser.browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await ctl?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  /** Signs in with `key` (signing out whoever is in), staying on the page the address names. */
  async function signIn(key: string, name: string): Promise<void> {
    if (await page.locator("#sign-out").isVisible()) await page.click("#sign-out");
    else await gotoSettled(page, `${ctl.url}/`);
    await page.fill("#credential", key);
    await page.click("form.sign-in button[type=submit]");
    await page.locator("#who", { hasText: name }).waitFor();
  }

  it("shows a viewer the deliveries, then the matrix with each cell's state, reason and constraints, and no buttons", async () => {
    await signIn(viewerKey, "delivery-viewer");
    await page.click('header a[href="#/deliveries"]');
    await page.locator("[data-testid=deliveries] tbody tr", { hasText: "Shop" }).waitFor();
    await page.click('a[href="#/deliveries/shop"]');
    // Rows newest first, columns upstream first.
    await cell(rel["1.1.0"]!, "production").locator("summary", { hasText: "WAITING" }).waitFor();
    expect(await page.locator("[data-testid=matrix] > thead > tr > th").allTextContents()).toEqual(["Release", "test ", "production "]);
    expect(
      await page.locator("[data-testid=matrix] > tbody > tr").evaluateAll((rs) => rs.map((r) => r.getAttribute("data-release"))),
    ).toEqual([rel["1.1.0"], rel["1.0.0"]]);
    expect(await cell(rel["1.1.0"]!, "test").locator(".status").first().textContent()).toBe("CURRENT");
    expect(await cell(rel["1.1.0"]!, "test").locator(".status.good").count()).toBe(1);
    expect(await cell(rel["1.0.0"]!, "test").locator("summary").textContent()).toMatch(/^RAN_BEFORE /);
    const waiting = cell(rel["1.1.0"]!, "production");
    expect(await waiting.locator("summary .reason").textContent()).toContain("approval");
    // The cell opens onto its constraints: APPROVAL pending, UPSTREAM passed.
    await waiting.locator("summary").click();
    const constraints = waiting.locator("[data-testid=constraints] tbody tr");
    await constraints.filter({ hasText: "APPROVAL" }).filter({ hasText: "PENDING" }).waitFor();
    await constraints.filter({ hasText: "UPSTREAM test" }).filter({ hasText: "PASSED" }).waitFor();
    expect(await page.locator("[data-testid=environment-messages] tbody tr", { hasText: "production" }).textContent()).toContain(
      "approval",
    );
    expect(await buttons().count()).toBe(0);
    await page.screenshot({ path: join(SHOTS, "delivery-viewer.png"), fullPage: true });
  }, 60_000);

  it("lets an operator approve a waiting release: production records the approval and takes it", async () => {
    await signIn(operatorKey, "delivery-operator");
    const waiting = cell(rel["1.1.0"]!, "production");
    await waiting.locator("[data-testid=approve]").waitFor();
    // Not on a cell that waits for nothing an operator can give, nor Pin where nothing ran.
    expect(await cell(rel["1.1.0"]!, "test").locator("[data-testid=approve]").count()).toBe(0);
    expect(await waiting.locator("[data-testid=pin]").count()).toBe(0);
    answer("change ticket 4711");
    await waiting.locator("[data-testid=approve]").click();
    await page.locator("[data-testid=delivery-notice]", { hasText: `Approved ${rel["1.1.0"]} for production` }).waitFor();
    const st = await waitFor("production to record the approval and run 1.1.0", async () => {
      const s = await envStatus("production");
      return s && s.current?.id === rel["1.1.0"] && !s.inFlight ? s : undefined;
    });
    expect(st.decisions.find((x) => x.kind === DecisionKind.APPROVED)).toMatchObject({
      releaseId: rel["1.1.0"],
      by: { actor: "api_key:delivery-operator", reason: "change ticket 4711" },
    });
    await waiting.locator("summary", { hasText: "CURRENT" }).waitFor();
    await page.screenshot({ path: join(SHOTS, "delivery-approved.png"), fullPage: true });
  }, 60_000);

  it("lets an operator pin an environment on a release it ran, then unpin it", async () => {
    const ran = cell(rel["1.0.0"]!, "test");
    answer("roll back: checkout errors");
    await ran.locator("[data-testid=pin]").click();
    await waitFor("test to be pinned to 1.0.0", async () =>
      (await envStatus("test"))?.pin?.release?.id === rel["1.0.0"] ? true : undefined,
    );
    await ran.locator("summary", { hasText: "PINNED" }).waitFor();
    const unpin = page.locator('[data-testid=matrix] th[data-env="test"] [data-testid=unpin]');
    answer("fix verified");
    await unpin.click();
    await waitFor("test's pin to be cleared", async () => ((await envStatus("test"))?.pin ? undefined : true));
    await unpin.waitFor({ state: "detached" });
    // A prompt answered with nothing does nothing.
    answer("");
    await cell(rel["1.1.0"]!, "production").locator("[data-testid=pin]").click();
    await page.locator("[data-testid=delivery-notice]", { hasText: "nothing done" }).waitFor();
    expect((await envStatus("production"))?.pin).toBeUndefined();
  }, 60_000);

  it("lets an operator mark a version bad", async () => {
    answer("memory leak");
    await page.locator(`[data-testid=matrix] [data-version="web.1.0.0"] [data-testid=mark-bad]`).click();
    await waitFor("web 1.0.0 to be marked bad", async () => {
      const v = (await ctl.admin(ResourceService).getResource({ resourceType: "artifact_version", id: "web.1.0.0" })).resource;
      const st = v?.currentState?.kind.case === "artifactVersion" ? v.currentState.kind.value : undefined;
      return st?.markedBad?.reason === "memory leak" ? true : undefined;
    });
    await cell(rel["1.0.0"]!, "test").locator("summary .status.bad", { hasText: "BAD" }).waitFor();
    await page.screenshot({ path: join(SHOTS, "delivery-marked-bad.png"), fullPage: true });
  }, 60_000);
});
