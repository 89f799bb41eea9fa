// A stand-in registry on loopback that speaks the Docker token protocol (Bearer), for the registry
// client's tests: every /v2/ request without a token its own /token endpoint issued is answered
// 401 with a Bearer challenge; /token issues one only for the right Basic login, service and
// scope. It counts what it was asked, can revoke what it issued, and serves tags paged as
// distribution does (sorted, ?n= and ?last=, Link rel="next") and manifests with or without a
// Docker-Content-Digest header.
import { createHash, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { createCa, issueServerCert } from "../../controller/tls/certificate-issuer.js";
import { parseSubjectName } from "../../controller/tls/subject-names.js";

export interface TokenRegistry {
  /** "127.0.0.1:port". */
  host: string;
  /** The repository path it serves ("x/y"). */
  path: string;
  tokenRequests: number;
  /** Requests of the manifest "hang", which it never answers. */
  hangs: number;
  /** Tag list pages it answered (with a valid token). */
  tagPages: number;
  /** 401s it answered on /v2/ (not on /token). */
  challenges: number;
  /** Every token it issued. */
  issued: string[];
  tags: string[];
  /** Tag -> manifest body; `withDigestHeader` false: HEAD answers without Docker-Content-Digest. */
  manifests: Map<string, Buffer>;
  withDigestHeader: boolean;
  /** How the Link of the next page is written. */
  linkStyle: "relative" | "absolute" | "foreign";
  /** Seconds each token is said to live (expires_in). */
  expiresIn: number;
  /** With `tlsRealm`: the CA of the token endpoint's certificate (a CA of its own). */
  caPem: string;
  /** Tokens issued so far stop working. */
  revokeTokens(): void;
  close(): Promise<void>;
}

/** Starts it on loopback; `tlsRealm`: its token endpoint is a second server, on https. */
export async function startTokenRegistry(username: string, password: string, options: { tlsRealm?: boolean } = {}): Promise<TokenRegistry> {
  const valid = new Set<string>();
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    try {
      answer(req, res);
    } catch (e) {
      res.writeHead(500).end(String(e));
    }
  };
  const servers: Server[] = [createServer(handle)];
  let caPem = "";
  if (options.tlsRealm) {
    const ca = await createCa(new Date(), "token realm test CA");
    const cert = await issueServerCert(ca, [parseSubjectName("127.0.0.1")!], new Date());
    caPem = ca.cert;
    servers.push(createHttpsServer({ cert: cert.cert, key: cert.key }, handle));
  }
  for (const s of servers) await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const port = (servers[0]!.address() as AddressInfo).port;
  const host = `127.0.0.1:${port}`;
  const realm = options.tlsRealm ? `https://127.0.0.1:${(servers[1]!.address() as AddressInfo).port}/token` : `http://${host}/token`;
  const reg: TokenRegistry = {
    host,
    path: "x/y",
    tokenRequests: 0,
    tagPages: 0,
    hangs: 0,
    challenges: 0,
    issued: [],
    tags: [],
    manifests: new Map(),
    withDigestHeader: true,
    linkStyle: "relative",
    expiresIn: 60,
    caPem,
    revokeTokens: () => valid.clear(),
    close: async () => {
      for (const s of servers) {
        s.closeAllConnections();
        await new Promise<void>((resolve) => s.close(() => resolve()));
      }
    },
  };
  const basic = `Basic ${Buffer.from(`${username}:${password}`).toString("base64")}`;
  const challenge = `Bearer realm="${realm}",service="reg",scope="repository:${reg.path}:pull"`;

  function answer(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? "/", `http://${host}`);
    if (url.pathname === "/token") {
      reg.tokenRequests++;
      const right =
        req.headers.authorization === basic &&
        url.searchParams.get("service") === "reg" &&
        url.searchParams.get("scope") === `repository:${reg.path}:pull`;
      if (!right) {
        res.writeHead(401, { "content-type": "application/json" }).end('{"details":"bad login"}');
        return;
      }
      const token = `tok-${randomBytes(12).toString("hex")}`;
      reg.issued.push(token);
      valid.add(token);
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ token, expires_in: reg.expiresIn }));
      return;
    }
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization ?? "")?.[1];
    if (!bearer || !valid.has(bearer)) {
      reg.challenges++;
      res.writeHead(401, { "www-authenticate": challenge, "content-type": "application/json" }).end('{"errors":[{"code":"UNAUTHORIZED"}]}');
      return;
    }
    const prefix = `/v2/${reg.path}/`;
    if (!url.pathname.startsWith(prefix)) {
      notFound(res, "NAME_UNKNOWN");
      return;
    }
    const rest = url.pathname.slice(prefix.length);
    if (rest === "tags/list") {
      reg.tagPages++;
      tagsPage(url, res);
      return;
    }
    const tag = /^manifests\/(.+)$/.exec(rest)?.[1];
    if (tag === "hang") {
      reg.hangs++;
      return; // never answers: the client's deadline (or abort) ends it
    }
    const body = tag === undefined ? undefined : reg.manifests.get(tag);
    if (!body) {
      notFound(res, "MANIFEST_UNKNOWN");
      return;
    }
    const headers: Record<string, string> = {
      "content-type": "application/vnd.oci.image.manifest.v1+json",
      "content-length": String(body.length),
    };
    if (reg.withDigestHeader) headers["docker-content-digest"] = `sha256:${createHash("sha256").update(body).digest("hex")}`;
    res.writeHead(200, headers);
    res.end(req.method === "HEAD" ? undefined : body);
  }

  function tagsPage(url: URL, res: ServerResponse): void {
    const n = Number(url.searchParams.get("n") ?? "100");
    const last = url.searchParams.get("last") ?? "";
    const sorted = [...reg.tags].sort();
    const after = sorted.filter((t) => t > last);
    const page = after.slice(0, n);
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (after.length > n) {
      const next = `/v2/${reg.path}/tags/list?n=${n}&last=${encodeURIComponent(page[page.length - 1]!)}`;
      const origin = reg.linkStyle === "absolute" ? `http://${host}` : reg.linkStyle === "foreign" ? `http://127.0.0.2:${port}` : "";
      headers.link = `<${origin}${next}>; rel="next"`;
    }
    res.writeHead(200, headers).end(JSON.stringify({ name: reg.path, tags: page }));
  }

  return reg;
}

function notFound(res: ServerResponse, code: string): void {
  res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ errors: [{ code, message: "not here" }] }));
}
