// The two headers of the OCI distribution API the client reads structure from (pure):
//
//   WWW-Authenticate: Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull,push"
//   Link: </v2/a/b/tags/list?last=x&n=100>; rel="next"
//
// RFC 9110 11.6.1: a header holds one or more challenges, each a scheme and then either a token68
// or comma-separated name=value parameters whose values may be quoted strings (with commas and
// backslash escapes inside). RFC 8288: a Link header holds <uri-reference> entries with ;params.

/** One authentication challenge: its scheme lowercased, its parameters by lowercased name. */
export interface AuthChallenge {
  scheme: string;
  params: Record<string, string>;
}

const TOKEN_CHAR = /[!#$%&'*+.^_`|~0-9A-Za-z-]/;
const TOKEN68 = /^[A-Za-z0-9._~+/-]+=*/;

/** The challenges of a WWW-Authenticate value, in order; unreadable rest is dropped. */
export function parseWwwAuthenticate(header: string): AuthChallenge[] {
  const out: AuthChallenge[] = [];
  let pos = 0;
  const skip = (chars: RegExp) => {
    while (pos < header.length && chars.test(header[pos]!)) pos++;
  };
  const token = (): string => {
    const start = pos;
    while (pos < header.length && TOKEN_CHAR.test(header[pos]!)) pos++;
    return header.slice(start, pos);
  };
  // A parameter starts here when a token is followed by '=' (not a token68's padding).
  const paramAhead = (): boolean => /^[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]*=(?!=|[ \t]*(?:,|$))/.test(header.slice(pos));
  const value = (): string => {
    if (header[pos] !== '"') {
      // A token by the RFC; read leniently up to the next ',' or space (some send bare URLs).
      const start = pos;
      while (pos < header.length && !/[\s,]/.test(header[pos]!)) pos++;
      return header.slice(start, pos);
    }
    pos++;
    let v = "";
    while (pos < header.length && header[pos] !== '"') {
      if (header[pos] === "\\" && pos + 1 < header.length) pos++;
      v += header[pos++];
    }
    pos++; // the closing quote (or past the end)
    return v;
  };
  for (;;) {
    skip(/[\s,]/);
    const scheme = token();
    if (!scheme) break;
    const challenge: AuthChallenge = { scheme: scheme.toLowerCase(), params: {} };
    out.push(challenge);
    skip(/[ \t]/);
    if (!paramAhead()) {
      const t68 = TOKEN68.exec(header.slice(pos));
      if (t68 && /^[ \t]*(,|$)/.test(header.slice(pos + t68[0].length))) {
        challenge.params.token68 = t68[0];
        pos += t68[0].length;
      }
      continue;
    }
    while (paramAhead()) {
      const name = token().toLowerCase();
      skip(/[ \t]/);
      pos++; // '='
      skip(/[ \t]/);
      challenge.params[name] = value();
      skip(/[ \t]/);
      if (header[pos] !== ",") break;
      pos++;
      skip(/[\s,]/);
    }
  }
  return out;
}

/** The target of the first link whose rel holds "next", as written (maybe relative); "" if none. */
export function nextLink(header: string | undefined): string {
  if (!header) return "";
  const entry = /<([^>]*)>((?:\s*;\s*[^;,=\s]+\s*(?:=\s*(?:"[^"]*"|[^;,\s]*))?)*)/g;
  for (let m = entry.exec(header); m; m = entry.exec(header)) {
    const params = m[2] ?? "";
    const rel = /;\s*rel\s*=\s*(?:"([^"]*)"|([^;,\s]*))/i.exec(params);
    const rels = (rel?.[1] ?? rel?.[2] ?? "").toLowerCase().split(/\s+/);
    if (rels.includes("next")) return m[1]!.trim();
  }
  return "";
}
