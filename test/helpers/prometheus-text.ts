// A strict parser of Prometheus' text exposition format (version 0.0.4), for the tests that
// scrape /metrics. The npm parser we tried (parse-prometheus-text-format) drops a histogram's
// labels, sum and count, so this one is ours; it throws on anything the format does not allow:
// a malformed line, a sample before its family's TYPE or of no family, a family typed twice, a
// duplicate series, a histogram whose buckets are not cumulative or do not end in +Inf = count.

export type MetricType = "counter" | "gauge" | "histogram" | "summary" | "untyped";

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  type: MetricType;
  help: string;
  samples: Sample[];
}

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*";
const LABEL = "[a-zA-Z_][a-zA-Z0-9_]*";
// Go's ParseFloat, which Prometheus uses, takes Inf and NaN in any case (prom-client writes "Nan").
const VALUE = "[+-]?(?:[Ii][Nn][Ff]|[Nn][Aa][Nn]|\\d+(?:\\.\\d*)?(?:[eE][+-]?\\d+)?|\\.\\d+(?:[eE][+-]?\\d+)?)";
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (${VALUE})(?: (-?\\d+))?$`);
const PAIR = new RegExp(`^(${LABEL})="((?:[^"\\\\\\n]|\\\\[\\\\"n])*)"(,|$)`);

/** The families of an exposition, by name; throws with the line number on anything malformed. */
export function parsePrometheusText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const series = new Set<string>();
  const typed = new Set<string>();
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  lines.forEach((line, i) => {
    const fail = (why: string): never => {
      throw new Error(`line ${i + 1}: ${why}: ${JSON.stringify(line)}`);
    };
    if (line === "") return;
    if (line.startsWith("#")) {
      const m = new RegExp(`^# (HELP|TYPE) (${NAME}) ?(.*)$`).exec(line);
      if (!m) return; // a plain comment
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      const family = families.get(name) ?? { name, type: "untyped" as MetricType, help: "", samples: [] };
      if (kind === "TYPE") {
        if (!/^(counter|gauge|histogram|summary|untyped)$/.test(rest)) fail("unknown type");
        if (families.get(name)?.samples.length || typed.has(name)) fail("TYPE after the family's samples, or twice");
        typed.add(name);
        family.type = rest as MetricType;
      } else {
        family.help = unescapeText(rest, false);
      }
      families.set(name, family);
      return;
    }
    const m = SAMPLE.exec(line) ?? fail("not a sample");
    const [, name, body = "", raw] = m as unknown as [string, string, string | undefined, string];
    const labels = parseLabels(body) ?? fail("malformed labels");
    const family = familyOf(families, name) ?? fail("a sample of no TYPE'd family");
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (series.has(key)) fail("a duplicate series");
    series.add(key);
    family.samples.push({ name, labels, value: number(raw) });
  });
  for (const f of families.values()) if (f.type === "histogram") checkHistogram(f);
  return families;
}

// The family a sample belongs to by the suffixes its type allows.
function familyOf(families: Map<string, Family>, name: string): Family | undefined {
  const own = families.get(name);
  if (own && (own.type === "counter" || own.type === "gauge" || own.type === "untyped" || own.type === "summary")) return own;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    if (!name.endsWith(suffix)) continue;
    const f = families.get(name.slice(0, -suffix.length));
    if (f?.type === "histogram" || (f?.type === "summary" && suffix !== "_bucket")) return f;
  }
  return undefined;
}

function parseLabels(body: string): Record<string, string> | undefined {
  const labels: Record<string, string> = {};
  let rest = body;
  while (rest !== "") {
    const m = PAIR.exec(rest);
    if (!m || m[1]! in labels) return undefined;
    labels[m[1]!] = unescapeText(m[2]!, true);
    rest = rest.slice(m[0].length);
  }
  return labels;
}

function number(text: string): number {
  const t = text.toLowerCase();
  if (t.endsWith("nan")) return Number.NaN;
  return t.endsWith("inf") ? (t.startsWith("-") ? -1 : 1) * Number.POSITIVE_INFINITY : Number(text);
}

function unescapeText(s: string, quotes: boolean): string {
  return s.replace(quotes ? /\\([\\"n])/g : /\\([\\n])/g, (_, c: string) => (c === "n" ? "\n" : c));
}

// Buckets grow with `le` and the +Inf one equals _count, for every label set.
function checkHistogram(f: Family): void {
  const groups = new Map<string, { buckets: [number, number][]; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const g = groups.get(key) ?? { buckets: [] };
    groups.set(key, g);
    if (s.name.endsWith("_bucket")) {
      if (le === undefined) throw new Error(`${f.name}: a bucket without le`);
      g.buckets.push([number(le), s.value]);
    } else if (s.name.endsWith("_count")) g.count = s.value;
  }
  for (const [key, g] of groups) {
    g.buckets.sort((a, b) => a[0] - b[0]);
    const last = g.buckets.at(-1);
    if (!last || last[0] !== Number.POSITIVE_INFINITY || last[1] !== g.count)
      throw new Error(`${f.name}${key}: no +Inf bucket equal to the count`);
    g.buckets.forEach(([, v], i) => {
      if (i > 0 && v < g.buckets[i - 1]![1]) throw new Error(`${f.name}${key}: buckets are not cumulative`);
    });
  }
}

/** The sum of the samples named `name` whose labels include `labels` (0 when none). */
export function sampleSum(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const f of families.values()) {
    for (const s of f.samples) {
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) total += s.value;
    }
  }
  return total;
}
