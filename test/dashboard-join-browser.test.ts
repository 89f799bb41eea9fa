// The dashboard's "Join a host" in a real browser (Debian's chromium, playwright-core) against the
// built controller serving an agent bundle built for this test: an admin presses the button on
// the fleet page and is shown the one line with a fresh single-use token; the line, run through
// sh and curl into a scratch root, joins a host with that token; a viewer who presses it is shown
// the API's refusal and no token is made. No Docker engine needed.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Role } from "../gen/skipper/v1/access_pb.js";
import { AccessService } from "../gen/skipper/v1/access_service_pb.js";
import { AgentBundleService } from "../gen/skipper/v1/agent_bundle_service_pb.js";
import { EnrollmentService } from "../gen/skipper/v1/enrollment_service_pb.js";
import { buildAgentBundle, SERVICE_PATH } from "./helpers/bundle.js";
import { gotoSettled, launchChromium, type TestBrowser } from "./helpers/browser.js";
import { E2E_ADMIN_TOKEN, startControllerProcess, type ControllerProcess } from "./helpers/processes.js";

const CHROMIUM = process.env.SKIPPER_TEST_CHROMIUM ?? "/usr/bin/chromium";
const haveBrowser = existsSync(CHROMIUM);
const SHOTS = join(process.cwd(), "test-artifacts", "dashboard");
if (!haveBrowser) console.warn(`!!! dashboard-join-browser.test.ts SKIPPED: needs ${CHROMIUM} (apt-get install chromium)`);

describe.skipIf(!haveBrowser)("the dashboard's Join a host (real browser, built controller)", () => {
  let root: string;
  let ctl: ControllerProcess;
  let browser: TestBrowser;
  let page: Page;

  beforeAll(async () => {
    await execa(process.execPath, ["scripts/build-ui.mjs"]);
    root = await mkdtemp(join(tmpdir(), "skipper-e2e-ui-join-"));
    const bundle = await buildAgentBundle(join(root, "bundle"));
    ctl = await startControllerProcess({ dataDir: join(root, "data"), extraArgs: ["--agent-bundle", bundle] });
    browser = await launchChromium(CHROMIUM, [Number(new URL(ctl.url).port)]);
    const context = await browser.browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await ctl?.stop();
    if (root && !process.env.SKIPPER_KEEP_E2E) await rm(root, { recursive: true, force: true });
  }, 60_000);

  /** Signs in with `credential` (signing out whoever is in), on the fleet page. */
  async function signIn(credential: string, who: string): Promise<void> {
    if (await page.locator("#sign-out").isVisible()) await page.click("#sign-out");
    else await gotoSettled(page, `${ctl.url}/ui/#/`);
    await page.fill("#credential", credential);
    await page.click("form.sign-in button[type=submit]");
    await page.locator("#who", { hasText: who }).waitFor();
  }

  const tokens = async () => (await ctl.admin(EnrollmentService).listEnrollmentTokens({ includeInactive: true })).enrollmentTokens;

  it("shows an admin the line with a fresh single-use token, and the line joins a host", async () => {
    await signIn(E2E_ADMIN_TOKEN, "ADMIN");
    await page.click("[data-testid=join-host]");
    const line = (await page.locator("[data-testid=join-line]").textContent()) ?? "";
    const pin = (await ctl.admin(AgentBundleService).getAgentBundle({})).tlsPin.slice("SHA256:".length);
    const prefix = `curl -fsS --pinnedpubkey sha256//${pin} -k ${ctl.url}/v1/join.sh | SKIPPER_JOIN_TOKEN=`;
    expect(line.startsWith(prefix), line).toBe(true);
    const id = /^ske_([^_]+)_\S+ sh -s --$/.exec(line.slice(prefix.length))?.[1];
    expect((await tokens()).find((t) => t.id === id)).toMatchObject({ uses: 1, remainingUses: 1, status: "active" });
    await mkdir(SHOTS, { recursive: true });
    await page.screenshot({ path: join(SHOTS, "join-a-host.png"), fullPage: true });

    // The line as a host runs it (into a scratch root, as a node named by the host: the token is for any).
    const scratch = join(root, "host");
    const run = await execa("sh", ["-c", `${line} --node-id ui-joined --root ${scratch}`], {
      env: { PATH: SERVICE_PATH },
      extendEnv: false,
      reject: false,
    });
    expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toContain("Enrolled as node ui-joined");
    expect((await tokens()).find((t) => t.id === id)).toMatchObject({ remainingUses: 0, enrolledNodes: ["ui-joined"] });
  }, 90_000);

  it("shows a viewer the API's refusal, and makes no token", async () => {
    const viewer = (await ctl.admin(AccessService).createApiKey({ name: "join-viewer", role: Role.VIEWER })).secret;
    const before = (await tokens()).length;
    await signIn(viewer, "join-viewer");
    await page.click("[data-testid=join-host]");
    await expect(page.locator("[data-testid=join-output] [role=alert]").textContent()).resolves.toMatch(/admin/i);
    expect((await tokens()).length).toBe(before);
  }, 60_000);
});
