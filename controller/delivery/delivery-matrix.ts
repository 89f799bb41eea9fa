// A delivery's matrix (GetDeliveryStatus): releases as rows (newest first), environments as
// columns (upstream first), each cell where the release stands there and why. Pure: a function of
// the environments' stored statuses and which versions are marked bad.
import { create } from "@bufbuild/protobuf";
import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  ConstraintPhase,
  ReleaseOutcome,
  type EnvironmentSpec,
  type EnvironmentStatus,
  type Release,
} from "../../gen/skipper/v1/delivery_pb.js";
import { CellState, DeliveryMatrixSchema, type DeliveryMatrix, type MatrixCell } from "../../gen/skipper/v1/delivery_service_pb.js";
import { knownReleases } from "./environment-commands.js";

/** Rows shown, newest first. */
export const MATRIX_ROWS = 20;

/** One environment of the delivery. */
export interface MatrixEnvironment {
  id: string;
  spec: EnvironmentSpec;
  status: EnvironmentStatus;
}

/** The matrix of `deliveryId` over its environments; `bad` holds the version ids marked bad. */
export function deliveryMatrix(deliveryId: string, environments: readonly MatrixEnvironment[], bad: ReadonlySet<string>): DeliveryMatrix {
  const envs = upstreamFirst(environments);
  const seen = new Map<string, { release: Release; at: number }>();
  for (const e of envs) {
    const s = e.status;
    const note = (r: Release | undefined, ts: Timestamp | undefined) => {
      if (!r) return;
      const at = ts ? timestampMs(ts) : 0;
      const was = seen.get(r.id);
      if (!was || at > was.at) seen.set(r.id, { release: r, at });
    };
    for (const c of s.candidates) note(c.release, c.firstSeen);
    for (const h of s.history) note(h.release, h.promotedAt);
    note(s.inFlight?.release, s.inFlight?.started?.at);
    for (const r of knownReleases(s)) note(r, undefined);
  }
  const sorted = [...seen.values()].sort((a, b) => b.at - a.at || a.release.id.localeCompare(b.release.id)).slice(0, MATRIX_ROWS);
  const rows = sorted.map(({ release }, i) => ({
    release,
    cells: envs.map((e) => {
      const cell = cellOf(e, release, bad);
      // Older than a release that runs (or ran) there, and never there itself: passed over.
      const newerRan = sorted
        .slice(0, i)
        .some(({ release: r }) => r.id === e.status.current?.id || e.status.history.some((h) => h.release?.id === r.id));
      return cell.state === CellState.NOT_YET && newerRan
        ? { ...cell, state: CellState.SKIPPED, reason: "a newer release entered instead" }
        : cell;
    }),
  }));
  return create(DeliveryMatrixSchema, {
    deliveryId,
    environmentIds: envs.map((e) => e.id),
    environmentMessages: envs.map((e) => e.status.message || "not evaluated yet"),
    rows,
  });
}

function cellOf(e: MatrixEnvironment, release: Release, bad: ReadonlySet<string>): MatrixCell {
  const s = e.status;
  const cell = (state: CellState, reason: string, constraints: MatrixCell["constraints"] = []) =>
    ({ environmentId: e.id, state, reason, constraints }) as MatrixCell;
  const badOnes = release.versions.filter((v) => bad.has(`${v.artifactId}.${v.version}`)).map((v) => `${v.artifactId} ${v.version}`);
  if (s.pin?.release?.id === release.id)
    return cell(CellState.PINNED, `pinned by ${s.pin.pinned?.actor ?? "?"}: ${s.pin.pinned?.reason ?? ""}`.trim());
  if (badOnes.length > 0) return cell(CellState.BAD, `${badOnes.join(", ")} marked bad`);
  if (s.inFlight?.release?.id === release.id) return cell(CellState.IN_FLIGHT, s.inFlight.message || "deploying");
  if (s.current?.id === release.id) return cell(CellState.CURRENT, "runs here");
  const candidate = s.candidates.find((c) => c.release?.id === release.id);
  if (candidate) {
    const first = candidate.constraints.find((c) => c.phase !== ConstraintPhase.PASSED);
    return cell(CellState.WAITING, first?.reason ?? "may enter at the next pass", candidate.constraints);
  }
  const record = s.history.find((h) => h.release?.id === release.id);
  if (record?.outcome === ReleaseOutcome.FAILED) return cell(CellState.FAILED, record.reason || "failed here");
  if (record) return cell(CellState.RAN_BEFORE, record.reason || `ran here (${ReleaseOutcome[record.outcome]?.toLowerCase() ?? ""})`);
  return cell(CellState.NOT_YET, "has not reached this environment");
}

// Environments ordered so that each comes after those it depends on (ties by id; a cycle, which
// writes refuse, is broken by id).
function upstreamFirst(envs: readonly MatrixEnvironment[]): MatrixEnvironment[] {
  const byId = new Map(envs.map((e) => [e.id, e]));
  const out: MatrixEnvironment[] = [];
  const state = new Map<string, "visiting" | "done">();
  const visit = (e: MatrixEnvironment) => {
    if (state.get(e.id)) return;
    state.set(e.id, "visiting");
    for (const d of [...e.spec.dependsOn].sort((a, b) => a.environmentId.localeCompare(b.environmentId))) {
      const up = byId.get(d.environmentId);
      if (up) visit(up);
    }
    state.set(e.id, "done");
    out.push(e);
  };
  for (const e of [...envs].sort((a, b) => a.id.localeCompare(b.id))) visit(e);
  return out;
}
