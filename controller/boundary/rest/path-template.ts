// google.api.http path templates, in the subset Skipper's contract uses: literal segments and
// `{field}` / `{field.sub}` variables that each match exactly one segment. Anything else in the
// grammar (`*`, `**`, `{x=pattern}`, `:verb`) is refused when routes are derived, so a contract
// change that needs it fails at start-up instead of routing requests wrongly.
//
// A request path is split on "/" while still percent-encoded and only then decoded segment by
// segment: "%2F" stays inside its segment and never creates a new one.

/** One segment of a parsed template. */
export type Segment = { kind: "literal"; text: string } | { kind: "variable"; fieldPath: string };

const VARIABLE = /^\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}$/;
// Characters a literal segment may hold; notably no template syntax and nothing needing encoding.
const LITERAL = /^[A-Za-z0-9._~-]+$/;

/** Parses a template such as "/v1/resources/{resource_type}/{id}"; throws on unsupported syntax. */
export function parseTemplate(template: string): Segment[] {
  if (!template.startsWith("/")) throw new Error(`http template ${JSON.stringify(template)} must start with "/"`);
  return template
    .slice(1)
    .split("/")
    .map((part) => {
      const variable = VARIABLE.exec(part);
      if (variable) return { kind: "variable", fieldPath: variable[1]! };
      if (LITERAL.test(part)) return { kind: "literal", text: part };
      throw new Error(`http template ${JSON.stringify(template)}: unsupported segment ${JSON.stringify(part)}`);
    });
}

/** Splits the path part of a request target into its still-encoded segments. */
export function splitPath(rawPath: string): string[] {
  return rawPath.slice(1).split("/");
}

/** The raw (still-encoded) variable values when `parts` fit the template, else undefined. */
export function matchSegments(segments: Segment[], parts: string[]): Map<string, string> | undefined {
  if (segments.length !== parts.length) return undefined;
  const vars = new Map<string, string>();
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    const part = parts[i]!;
    if (seg.kind === "literal") {
      // Compared undecoded: a literal only matches its own spelling.
      if (part !== seg.text) return undefined;
    } else {
      // An empty segment ("/v1/work-orders/") names nothing; leave it to the 404.
      if (part === "") return undefined;
      vars.set(seg.fieldPath, part);
    }
  }
  return vars;
}

/** Orders templates so that, position by position, a literal segment beats a variable. */
export function compareSpecificity(a: Segment[], b: Segment[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const ka = a[i]!.kind === "literal" ? 0 : 1;
    const kb = b[i]!.kind === "literal" ? 0 : 1;
    if (ka !== kb) return ka - kb;
  }
  return 0;
}

/** Percent-decodes one segment; undefined when the encoding is malformed. */
export function decodeSegment(raw: string): string | undefined {
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
  }
}
