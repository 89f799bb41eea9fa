// The web dashboard's files, served under /ui/ on the API's own port: the page, its script and its
// stylesheet as `npm run build` bundles them (scripts/build-ui.mjs) from ui/. Only the files the
// bundle holds are served, read once at start (a name is looked up, never joined into a path),
// with a Content-Security-Policy that lets the page load nothing but them and talk to nothing but
// this origin. The page holds no data: everything it shows comes through the API, under the
// credential the user signs in with.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { extname, join } from "node:path";
import { fileURLToPath } from "node:url";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json",
  ".svg": "image/svg+xml",
};
const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
};

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/** Where the built dashboard is: beside the built controller (dist/ui), else the repo's dist/ui. */
export function defaultDashboardDir(): string | undefined {
  for (const rel of ["../../ui/", "../../dist/ui/"]) {
    const dir = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(join(dir, "app.js")) && existsSync(join(dir, "index.html"))) return dir;
  }
  return undefined;
}

/**
 * A handler for / and /ui/…: true when it answered. Without a built dashboard, /ui/ says how to
 * build one.
 */
export function dashboardHandler(dir: string | undefined): (req: Req, res: Res) => boolean {
  const files = new Map<string, Buffer>();
  if (dir) for (const name of readdirSync(dir)) if (TYPES[extname(name)]) files.set(name, readFileSync(join(dir, name)));
  return (req, res) => {
    const path = (req.url ?? "/").split("?")[0]!;
    if (path !== "/" && path !== "/ui" && !path.startsWith("/ui/")) return false;
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain; charset=utf-8", ...SECURITY_HEADERS });
      res.end("method not allowed\n");
      return true;
    }
    if (path === "/" || path === "/ui") {
      res.writeHead(302, { location: "/ui/", ...SECURITY_HEADERS });
      res.end();
      return true;
    }
    let name = "index.html";
    try {
      if (path !== "/ui/") name = decodeURIComponent(path.slice("/ui/".length));
    } catch {
      name = "";
    }
    const body = files.get(name);
    if (!body) {
      const built = files.size > 0;
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8", ...SECURITY_HEADERS });
      res.end(built ? "not found\n" : "the dashboard is not built: run `npm run build`\n");
      return true;
    }
    res.writeHead(200, {
      "content-type": TYPES[extname(name)]!,
      "content-length": String(body.length),
      // The page is small and changes with every build: always asked again (a 304 costs as much).
      "cache-control": "no-cache",
      ...SECURITY_HEADERS,
    });
    if (req.method === "HEAD") res.end();
    else res.end(body);
    return true;
  };
}
