import { describe, expect, it } from "vitest";
import { nextLink, parseWwwAuthenticate } from "./registry-headers.js";

describe("parseWwwAuthenticate", () => {
  const cases: [string, string, ReturnType<typeof parseWwwAuthenticate>][] = [
    ["basic with a realm", 'Basic realm="Registry Realm"', [{ scheme: "basic", params: { realm: "Registry Realm" } }]],
    [
      "bearer with a scope holding commas and colons",
      'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:samalba/my-app:pull,push"',
      [
        {
          scheme: "bearer",
          params: { realm: "https://auth.docker.io/token", service: "registry.docker.io", scope: "repository:samalba/my-app:pull,push" },
        },
      ],
    ],
    [
      "two challenges in one value, spaces around '=' and ','",
      'Basic realm = "a, b" , Bearer realm="http://127.0.0.1:9/token", error="insufficient_scope"',
      [
        { scheme: "basic", params: { realm: "a, b" } },
        { scheme: "bearer", params: { realm: "http://127.0.0.1:9/token", error: "insufficient_scope" } },
      ],
    ],
    [
      "unquoted values and a mixed-case scheme",
      "BEARER Realm=https://x/t,Service=reg",
      [{ scheme: "bearer", params: { realm: "https://x/t", service: "reg" } }],
    ],
    ["backslash escapes in a quoted value", 'Basic realm="say \\"hi\\", ok"', [{ scheme: "basic", params: { realm: 'say "hi", ok' } }]],
    ["a scheme alone", "Negotiate", [{ scheme: "negotiate", params: {} }]],
    [
      "a token68 then another challenge",
      "Negotiate abc+/d==, Basic realm=x",
      [
        { scheme: "negotiate", params: { token68: "abc+/d==" } },
        { scheme: "basic", params: { realm: "x" } },
      ],
    ],
    ["an unterminated quote keeps what it has", 'Bearer realm="http://x/t', [{ scheme: "bearer", params: { realm: "http://x/t" } }]],
    ["empty", "", []],
  ];
  it.each(cases)("%s", (_name, header, want) => {
    expect(parseWwwAuthenticate(header)).toEqual(want);
  });
});

describe("nextLink", () => {
  const cases: [string, string | undefined, string][] = [
    ["none", undefined, ""],
    ["relative, rel quoted", '</v2/a/b/tags/list?last=x&n=2>; rel="next"', "/v2/a/b/tags/list?last=x&n=2"],
    ["absolute, rel unquoted", "<https://r.example/v2/a/tags/list?last=y>;rel=next", "https://r.example/v2/a/tags/list?last=y"],
    ["next after prev, with other params", '</p?1>; rel="prev"; title="a,b", </n?2>; type="x"; rel="next"', "/n?2"],
    ["a rel list holding next", '</n?3>; rel="last next"', "/n?3"],
    ["only prev", '</p>; rel="prev"', ""],
  ];
  it.each(cases)("%s", (_name, header, want) => {
    expect(nextLink(header)).toBe(want);
  });
});
