// Image references as Docker and Compose read them (the grammar of distribution/reference,
// reference.go and normalize.go):
//
//   reference  := name [ ":" tag ] [ "@" digest ]
//   name       := [ domain "/" ] path               at most 255 characters
//   domain     := host [ ":" port ]                 host: DNS labels (letters, digits, '-') joined
//                                                   by '.', or an IPv6 address in brackets
//   path       := component ( "/" component )*      component: [a-z0-9]+ ( separator [a-z0-9]+ )*
//   separator  := "." | "_" | "__" | "-"+
//   tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
//   digest     := algorithm ":" hex                 algorithm: [A-Za-z][A-Za-z0-9]* joined by
//                                                   [+._-]; hex at least 32 hex digits (sha256: 64,
//                                                   sha384: 96, sha512: 128)
//
// The first part of a name is its domain only when it could not be a path: it has a '.' or a ':',
// or is "localhost" (or has an uppercase letter), as Docker decides. A bare 64-hex name is an image
// id, not a reference. Pure and dependency-free: the controller, the agent and the CLI share it.

/** A parsed reference; empty strings for the parts it does not have. */
export interface ImageReference {
  /** Registry host (and port), "" when the reference names none (Docker Hub). */
  domain: string;
  /** The repository path, e.g. "library/nginx" or "team/app". */
  path: string;
  tag: string;
  digest: string;
}

export type ImageReferenceResult = { ok: true; reference: ImageReference } | { ok: false; problem: string };

const MAX_NAME = 255;
const COMPONENT = /^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$/;
const DOMAIN_LABEL = /^(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])$/;
const IPV6 = /^\[[0-9A-Fa-f:.]+(?:%[A-Za-z0-9._~-]+)?\]$/;
const PORT = /^[0-9]+$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const ALGORITHM = /^[A-Za-z][A-Za-z0-9]*(?:[+._-][A-Za-z][A-Za-z0-9]*)*$/;
const HEX = /^[0-9a-fA-F]{32,}$/;
const HEX_LENGTH: Readonly<Record<string, number>> = { sha256: 64, sha384: 96, sha512: 128 };

/** Parses an image reference, or says what is wrong with it (a phrase: "has an empty tag"). */
export function parseImageReference(text: string): ImageReferenceResult {
  const fail = (problem: string): ImageReferenceResult => ({ ok: false, problem });
  if (text === "") return fail("is empty");
  if (/\s/.test(text)) return fail("contains whitespace");
  let rest = text;
  let digest = "";
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    const problem = digestProblem(digest);
    if (problem) return fail(problem);
  }
  // A tag follows the last ':' after the last '/' (a ':' before it is the domain's port).
  let tag = "";
  const colon = rest.lastIndexOf(":");
  if (colon > rest.lastIndexOf("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (tag === "") return fail("has an empty tag after ':'");
    if (!TAG.test(tag))
      return fail(
        `has an invalid tag ${JSON.stringify(tag)}: letters, digits, '_', '.' and '-', at most 128, not starting with '.' or '-'`,
      );
  }
  if (rest === "") return fail("has no repository name");
  if (rest.length > MAX_NAME) return fail(`has a name longer than ${MAX_NAME} characters`);
  if (/^[a-f0-9]{64}$/.test(rest)) return fail("is a 64-hex image id, not a repository name");
  const slash = rest.indexOf("/");
  const first = slash < 0 ? rest : rest.slice(0, slash);
  const hasDomain = slash >= 0 && (/[.:]/.test(first) || first === "localhost" || first.toLowerCase() !== first);
  const domain = hasDomain ? first : "";
  const path = hasDomain ? rest.slice(slash + 1) : rest;
  if (hasDomain) {
    const problem = domainProblem(domain);
    if (problem) return fail(problem);
  }
  if (path === "") return fail("has no repository path after its registry");
  for (const c of path.split("/")) {
    if (c === "") return fail(`has an empty path component in ${JSON.stringify(path)}`);
    if (c.toLowerCase() !== c) return fail(`has an uppercase repository name ${JSON.stringify(path)}: repository names must be lowercase`);
    if (!COMPONENT.test(c))
      return fail(
        `has an invalid repository name component ${JSON.stringify(c)}: lowercase letters and digits, separated by '.', '_', '__' or '-'`,
      );
  }
  return { ok: true, reference: { domain, path, tag, digest } };
}

/** What is wrong with an image reference, or undefined when it is one. */
export function imageReferenceProblem(text: string): string | undefined {
  const r = parseImageReference(text);
  return r.ok ? undefined : r.problem;
}

function domainProblem(domain: string): string | undefined {
  let host = domain;
  let port = "";
  const close = domain.lastIndexOf("]");
  const colon = domain.lastIndexOf(":");
  if (colon > close) {
    host = domain.slice(0, colon);
    port = domain.slice(colon + 1);
    if (!PORT.test(port)) return `has an invalid registry port in ${JSON.stringify(domain)}`;
  }
  if (host.startsWith("[")) return IPV6.test(host) ? undefined : `has an invalid IPv6 registry address ${JSON.stringify(host)}`;
  if (host.split(".").every((label) => DOMAIN_LABEL.test(label))) return undefined;
  return `has an invalid registry host ${JSON.stringify(host)}`;
}

function digestProblem(digest: string): string | undefined {
  const colon = digest.indexOf(":");
  const algorithm = colon < 0 ? "" : digest.slice(0, colon);
  const hex = colon < 0 ? "" : digest.slice(colon + 1);
  if (!ALGORITHM.test(algorithm) || !HEX.test(hex))
    return `has an invalid digest ${JSON.stringify(digest)}: algorithm:hex, e.g. sha256: and 64 hex digits`;
  const length = HEX_LENGTH[algorithm];
  if (length !== undefined && hex.length !== length) return `has a ${algorithm} digest of ${hex.length} hex digits, not ${length}`;
  if (length !== undefined && hex !== hex.toLowerCase()) return `has a ${algorithm} digest with uppercase hex digits`;
  return undefined;
}
