// Chromium for the browser tests, in a network namespace of its own where it can: it reaches the
// named loopback ports through Unix sockets this process serves (test/helpers/browser-netns.mjs
// says why). Where a namespace cannot be had (no root, no `unshare` or `ip`), chromium runs as it
// is, with a warning: its requests may then fail with net::ERR_NETWORK_CHANGED while Docker changes
// the host's interfaces.
import { execFileSync } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect, createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Browser, chromium, type Page, type Request } from "playwright-core";

export interface TestBrowser {
  browser: Browser;
  /** Whether chromium runs in a namespace of its own. */
  isolated: boolean;
  close(): Promise<void>;
}

/** Starts chromium able to reach 127.0.0.1 at `ports` (and nothing else when isolated). */
export async function launchChromium(executable: string, ports: number[]): Promise<TestBrowser> {
  const args = ["--no-sandbox"];
  if (!canIsolate()) {
    console.warn("!!! chromium runs in the host's network namespace (unshare --net failed): expect ERR_NETWORK_CHANGED flakes");
    const browser = await chromium.launch({ executablePath: executable, args });
    return { browser, isolated: false, close: () => browser.close() };
  }
  const dir = await mkdtemp(join(tmpdir(), "skipper-browser-"));
  const servers: Server[] = [];
  const routes: string[] = [];
  for (const port of ports) {
    const socket = join(dir, `${port}.sock`);
    const server = createServer((outside) => {
      const inside = connect(port, "127.0.0.1");
      outside.pipe(inside).pipe(outside);
      outside.on("error", () => inside.destroy());
      inside.on("error", () => outside.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(socket, resolve);
    });
    servers.push(server);
    routes.push(`${port}=${socket}`);
  }
  const wrapper = join(dir, "chromium");
  const runner = fileURLToPath(new URL("./browser-netns.mjs", import.meta.url));
  await writeFile(wrapper, `#!/bin/sh\nexec unshare --net ${quote(process.execPath)} ${quote(runner)} "$@"\n`);
  await chmod(wrapper, 0o755);
  let browser: Browser | undefined;
  const close = async () => {
    await browser?.close().catch(() => undefined);
    for (const s of servers) s.close();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    browser = await chromium.launch({
      executablePath: wrapper,
      args,
      env: { ...process.env, SKIPPER_BROWSER_EXECUTABLE: executable, SKIPPER_BROWSER_FORWARD: routes.join(",") },
    });
  } catch (e) {
    await close();
    throw e;
  }
  return { browser, isolated: true, close };
}

function canIsolate(): boolean {
  try {
    execFileSync("unshare", ["--net", "ip", "link", "set", "lo", "up"], { stdio: "ignore", timeout: 10_000 });
    return true;
  } catch {
    return false;
  }
}

function quote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * Opens `url` and waits for the dashboard to draw its sign-in form, trying again when it does not.
 * Success is the form on the page, not the load event: a request of the page lost on the way (see
 * the top of this file for the one cause seen) leaves a page whose "load" never comes. What went wrong
 * on each try is printed when the last one fails.
 */
export async function gotoSettled(page: Page, url: string): Promise<void> {
  const seen: string[] = [];
  const failed = (r: Request) => seen.push(`request failed: ${r.method()} ${r.url()}: ${r.failure()?.errorText}`);
  page.on("requestfailed", failed);
  try {
    for (let attempt = 1; attempt <= 5; attempt++) {
      try {
        await page.goto(url, { waitUntil: "commit", timeout: 20_000 });
        await page.locator("form.sign-in #credential").waitFor({ timeout: 20_000 });
        if (new URL(page.url()).origin === new URL(url).origin) return;
        seen.push(`attempt ${attempt}: ended on ${page.url()}`);
      } catch (e) {
        seen.push(`attempt ${attempt}: ${String(e).split("\n")[0]} (on ${page.url()})`);
      }
    }
    throw new Error(`the dashboard never drew its sign-in form at ${url}:\n  ${seen.join("\n  ")}`);
  } finally {
    page.off("requestfailed", failed);
  }
}
