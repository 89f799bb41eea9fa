// DOM building without innerHTML: every text goes in as a text node, so nothing a resource holds
// (names, labels, messages) can become markup.
export type Child = Node | string | number | undefined | null | false;

/** An element with attributes (strings; `on*` functions are listeners) and children. */
export function h(tag: string, attrs: Record<string, string | ((e: Event) => void) | undefined> = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined) continue;
    if (typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v);
  }
  for (const c of children) if (c !== undefined && c !== null && c !== false) el.append(typeof c === "object" ? c : String(c));
  return el;
}

/** A table with a header row; `rows` empty shows one row saying so. */
export function table(headers: string[], rows: Child[][], empty = "none", testId?: string): HTMLElement {
  return h(
    "table",
    { "data-testid": testId },
    h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", {}, t)))),
    h(
      "tbody",
      {},
      ...(rows.length > 0
        ? rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c))))
        : [h("tr", {}, h("td", { colspan: String(headers.length), class: "muted" }, empty))]),
    ),
  );
}

/** A status word colored by what it means. */
export function status(name: string): HTMLElement {
  const good = /^(CURRENT|PASSED|CONVERGED|ONLINE|SUCCESS|SUCCEEDED|COMPLETED|HEALTHY|RUNNING|APPLY_OK|ROLLBACK_OK)$/;
  const bad = /^BAD$|FAIL|OFFLINE|MISSING|ROLLED_BACK|ABORTED|UNHEALTHY|DISABLED|NO_MATCHING/;
  // Replaced before anything ran, ran before, not there yet: neither a failure nor something to wait for.
  const quiet = /^(SUPERSEDED|RAN_BEFORE|NOT_YET|SKIPPED)$/;
  const cls = good.test(name) ? "good" : quiet.test(name) ? "muted" : bad.test(name) ? "bad" : "wait";
  return h("span", { class: `status ${cls}` }, name);
}

/** The short form of a spec hash. */
export function short(hash: string): string {
  return hash ? hash.slice(0, 12) : "—";
}
