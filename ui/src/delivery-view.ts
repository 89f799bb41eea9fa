// The delivery view: the deliveries to choose from (#/deliveries), and one delivery's matrix
// (#/deliveries/ID) from GetDeliveryStatus: rows are releases (newest first), columns environments
// (upstream first), each cell the release's state there, coloured, with its reason; a cell opens
// its constraints (kind, phase, reason, since, until). Under the matrix, each environment's
// message. A caller holding OPERATE (main.ts decides, from WhoAmI) also gets the decisions of
// delivery-actions.ts on the cells they fit; others see none.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ConstraintKind, ConstraintPhase, type EnvironmentStatus } from "../../gen/skipper/v1/delivery_pb.js";
import { CellState, type MatrixCell, type MatrixRow } from "../../gen/skipper/v1/delivery_service_pb.js";
import type { Api } from "./api.js";
import { type Caller, type DeliveryActions, deliveryActions, notice } from "./delivery-actions.js";
import { h, status, table } from "./dom.js";

const when = (t: Timestamp | undefined) => (t ? timestampDate(t).toLocaleString() : "—");
const cellName = (s: CellState) => CellState[s] ?? String(s);
/** The cells whose constraints are open, "environment/release": kept as events draw the page again. */
const opened = new Set<string>();

/** Every delivery, each a link to its matrix. */
export async function deliveriesPage(api: Api): Promise<HTMLElement> {
  const all = [];
  let pageToken = "";
  do {
    const page = await api.resources.listResources({ resourceType: "delivery", pageSize: 1000, pageToken });
    all.push(...page.resources);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  return h(
    "section",
    {},
    h("p", {}, h("a", { href: "#/" }, "← Fleet")),
    h("h1", {}, `Deliveries (${all.length})`),
    table(
      ["Delivery", "Name"],
      all.map((d) => [
        h("a", { href: `#/deliveries/${encodeURIComponent(d.id)}` }, d.id),
        d.desiredState?.kind.case === "delivery" ? d.desiredState.kind.value.displayName : "",
      ]),
      "no deliveries",
      "deliveries",
    ),
  );
}

/** One delivery's matrix; `rerender` draws the page again after a decision. */
export async function deliveryPage(api: Api, id: string, caller: Caller, rerender: () => void): Promise<HTMLElement> {
  const matrix = (await api.delivery.getDeliveryStatus({ id })).matrix!;
  const envs = matrix.environmentIds;
  // Pins and holds are in each environment's status (the matrix shows a pin only as a cell).
  const statuses = await Promise.all(
    envs.map(async (e) => {
      const r = (await api.resources.getResource({ resourceType: "environment", id: e })).resource;
      return r?.currentState?.kind.case === "environment" ? r.currentState.kind.value : undefined;
    }),
  );
  const acts = caller.operates ? deliveryActions(api, rerender) : undefined;
  return h(
    "section",
    { "data-delivery": id },
    h("p", {}, h("a", { href: "#/deliveries" }, "← Deliveries")),
    h("h1", {}, `Delivery ${id}`),
    notice,
    h(
      "table",
      { class: "matrix", "data-testid": "matrix" },
      h(
        "thead",
        {},
        h("tr", {}, h("th", {}, "Release"), ...envs.map((e, i) => h("th", { "data-env": e }, e, " ", unpinOf(e, statuses[i], acts)))),
      ),
      h(
        "tbody",
        {},
        ...(matrix.rows.length > 0
          ? matrix.rows.map((row) => rowOf(row, acts))
          : [h("tr", {}, h("td", { colspan: String(envs.length + 1), class: "muted" }, "no releases yet"))]),
      ),
    ),
    h("h2", {}, "Environments"),
    table(
      ["Environment", "Message"],
      envs.map((e, i) => [e, matrix.environmentMessages[i] ?? ""]),
      "no environments",
      "environment-messages",
    ),
  );
}

// The environment's Unpin, when it is pinned or held and the caller may decide.
function unpinOf(env: string, st: EnvironmentStatus | undefined, acts: DeliveryActions | undefined): HTMLElement | undefined {
  if (!st?.pin && !st?.hold) return undefined;
  return h("span", {}, status(st.pin ? "PINNED" : "HELD"), acts ? acts.unpin(env) : undefined);
}

// One release: its id and versions (each with Mark bad), then its cell in each environment.
function rowOf(row: MatrixRow, acts: DeliveryActions | undefined): HTMLElement {
  const r = row.release!;
  return h(
    "tr",
    { "data-release": r.id },
    h(
      "th",
      {},
      h("code", {}, r.id),
      ...r.versions.map((v) =>
        h(
          "div",
          { class: "version", "data-version": `${v.artifactId}.${v.version}` },
          `${v.artifactId} ${v.version} `,
          acts?.markBad(v.artifactId, v.version),
        ),
      ),
    ),
    ...row.cells.map((c) => h("td", { "data-env": c.environmentId }, cellOf(r.id, c, acts))),
  );
}

// A cell: its state and reason, opening onto its constraints; the decisions that fit its state.
function cellOf(releaseId: string, c: MatrixCell, acts: DeliveryActions | undefined): HTMLElement {
  const key = `${c.environmentId}/${releaseId}`;
  const approval = c.constraints.find((k) => k.kind === ConstraintKind.APPROVAL);
  const canApprove = c.state === CellState.WAITING && approval?.phase === ConstraintPhase.PENDING;
  const canPin = c.state === CellState.CURRENT || c.state === CellState.RAN_BEFORE;
  const details = h(
    "details",
    { class: "cell", "data-testid": "cell", ...(opened.has(key) ? { open: "" } : {}) },
    h("summary", {}, status(cellName(c.state)), " ", h("span", { class: "reason" }, c.reason)),
    c.constraints.length === 0
      ? h("p", { class: "muted" }, "no constraints: not a candidate here")
      : table(
          ["Constraint", "Phase", "Reason", "Since", "Until"],
          c.constraints.map((k) => [
            `${ConstraintKind[k.kind] ?? k.kind}${k.subject ? ` ${k.subject}` : ""}`,
            status(ConstraintPhase[k.phase] ?? String(k.phase)),
            k.reason,
            when(k.since),
            when(k.until),
          ]),
          "none",
          "constraints",
        ),
  );
  details.addEventListener("toggle", () => ((details as HTMLDetailsElement).open ? opened.add(key) : opened.delete(key)));
  return h(
    "div",
    {},
    details,
    acts && canApprove ? acts.approve(c.environmentId, releaseId) : undefined,
    acts && canPin ? acts.pin(c.environmentId, releaseId) : undefined,
  );
}
