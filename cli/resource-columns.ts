// The columns `skipper get TYPE` shows per resource type: what an operator looks for first
// (`-o table`), and more with `-o wide`. Secret values never appear: the API does not return them,
// and a secret's row shows its value names and versions only.
import type { Resource } from "../gen/skipper/v1/resource_pb.js";
import { ConvergenceStatus, DeploymentPhase } from "../gen/skipper/v1/resource_pb.js";
import { RolloutNodeState, RolloutStatus } from "../gen/skipper/v1/rollout_pb.js";
import { PromotionPhase, VersionOrigin } from "../gen/skipper/v1/delivery_pb.js";
import { ProcessModuleReason, ProcessModuleRun } from "../gen/skipper/v1/process_pb.js";
import { AgentUpdateState } from "../gen/skipper/v1/agent_update_pb.js";
import type { ResourceType } from "../common/ids.js";
import { livenessName } from "../common/node-liveness-name.js";
import { paint, type Io } from "./io.js";
import { age, cut, enumName, labels, table, when } from "./output.js";

interface Columns {
  head: string[];
  row(r: Resource, io: Pick<Io, "color">): string[];
  wideHead: string[];
  wide(r: Resource): string[];
}

const spec = <K extends NonNullable<Resource["desiredState"]>["kind"]["case"]>(r: Resource, kind: K) =>
  (r.desiredState?.kind.case === kind ? r.desiredState.kind.value : undefined) as
    | Extract<NonNullable<Resource["desiredState"]>["kind"], { case: K }>["value"]
    | undefined;
const status = <K extends NonNullable<Resource["currentState"]>["kind"]["case"]>(r: Resource, kind: K) =>
  (r.currentState?.kind.case === kind ? r.currentState.kind.value : undefined) as
    | Extract<NonNullable<Resource["currentState"]>["kind"], { case: K }>["value"]
    | undefined;

/** A convergence status, green when converged and red when something is in the way. */
export function convergence(r: Resource, io: Pick<Io, "color">): string {
  const s = r.convergence?.status ?? ConvergenceStatus.UNSPECIFIED;
  const name = enumName(ConvergenceStatus, s);
  if (s === ConvergenceStatus.CONVERGED) return paint(io, "green", name);
  if (s === ConvergenceStatus.UNSPECIFIED) return name;
  return paint(io, BLOCKING_CONVERGENCE.has(s) ? "red" : "yellow", name);
}

/** Convergence statuses that will not clear by waiting: something must change first. */
export const BLOCKING_CONVERGENCE = new Set([
  ConvergenceStatus.ORDER_FAILED,
  ConvergenceStatus.REFERENCE_MISSING,
  ConvergenceStatus.NO_MATCHING_NODE,
  ConvergenceStatus.NODE_DISABLED,
  ConvergenceStatus.NODE_OFFLINE,
  ConvergenceStatus.NOTHING_TO_DEPLOY,
  ConvergenceStatus.ROLLED_BACK,
]);

const placement = (p: { targetNodeId: string; nodeSelector: Record<string, string> } | undefined) =>
  [p?.targetNodeId ? `node=${p.targetNodeId}` : "", Object.keys(p?.nodeSelector ?? {}).length ? labels(p?.nodeSelector) : ""]
    .filter(Boolean)
    .join(" ") || "-";
const list = (xs: string[]) => (xs.length > 0 ? xs.join(",") : "-");
const id = (r: Resource) => (r.deletion ? `${r.id} (deleted)` : r.id);

const COLUMNS: Record<ResourceType, Columns> = {
  tenant: {
    head: ["ID", "CONVERGENCE", "NODES", "AGE"],
    row: (r, io) => [id(r), convergence(r, io), list(tenantNodes(r)), age(r.createdAt)],
    wideHead: ["PLACEMENT", "SERVICES", "PROCESSES", "ROLLOUT", "LABELS", "MESSAGE"],
    wide: (r) => [
      placement(spec(r, "tenant")?.deploymentPolicy),
      list(spec(r, "tenant")?.serviceIds ?? []),
      list((spec(r, "tenant")?.processes ?? []).map((p) => p.spec?.module ?? "")),
      status(r, "tenant")?.rolloutId || "-",
      labels(r.metadata?.labels),
      cut(r.convergence?.message ?? "", 60),
    ],
  },
  node: {
    head: ["ID", "LIVENESS", "LABELS", "AGENT", "LAST HEARTBEAT"],
    row: (r, io) => [
      id(r),
      liveness(r, io),
      labels(nodeLabels(r)),
      status(r, "node")?.agentVersion || "-",
      age(status(r, "node")?.lastHeartbeatAt),
    ],
    wideHead: ["DISABLED", "UPDATER", "DOCKER", "COMPOSE", "PROXY", "OS/ARCH", "PROJECTS", "REPORTED LABELS"],
    wide: (r) => {
      const st = status(r, "node");
      const caps = st?.capabilities;
      const u = st?.agentUpdate;
      return [
        spec(r, "node")?.disabled ? "yes" : "no",
        !u?.supervised ? "none" : `${enumName(AgentUpdateState, u.state).toLowerCase()}${u.targetVersion ? ` ${u.targetVersion}` : ""}`,
        caps?.dockerVersion || "-",
        caps?.composeVersion || "-",
        caps?.proxy ? "haproxy" : "-",
        caps?.os ? `${caps.os}/${caps.arch}` : "-",
        list((st?.projects ?? []).map((p) => p.projectName)),
        labels(st?.labels),
      ];
    },
  },
  service: {
    head: ["ID", "TENANT", "IMAGE", "CONVERGENCE", "AGE"],
    row: (r, io) => [id(r), spec(r, "service")?.tenantId || "-", spec(r, "service")?.image || "-", convergence(r, io), age(r.createdAt)],
    wideHead: ["COMPOSE SERVICE", "PORTS", "PLACEMENT", "LABELS", "MESSAGE"],
    wide: (r) => {
      const s = spec(r, "service");
      return [
        s?.composeService || r.id,
        list((s?.ports ?? []).map((p) => `${p.hostIp ? `${p.hostIp}:` : ""}${p.hostPort}:${p.containerPort}/${p.protocol || "tcp"}`)),
        placement(s?.placement),
        labels(r.metadata?.labels),
        cut(r.convergence?.message ?? "", 60),
      ];
    },
  },
  secret: {
    head: ["ID", "TENANT", "VALUES", "REGISTRY", "AGE"],
    row: (r) => {
      const s = spec(r, "secret");
      return [
        id(r),
        s?.tenantId || "-",
        list((s?.entries ?? []).map((e) => `${e.name}@v${e.version}`)),
        s?.registry || "-",
        age(r.createdAt),
      ];
    },
    wideHead: ["LABELS"],
    wide: (r) => [labels(r.metadata?.labels)],
  },
  network: {
    head: ["ID", "TENANT", "DRIVER", "INTERNAL", "AGE"],
    row: (r) => {
      const s = spec(r, "network");
      return [id(r), s?.tenantId || "-", s?.driver || "-", s?.internal ? "yes" : "no", age(r.createdAt)];
    },
    wideHead: ["LABELS"],
    wide: (r) => [labels(r.metadata?.labels)],
  },
  volume: {
    head: ["ID", "TENANT", "DRIVER", "MOUNT", "AGE"],
    row: (r) => {
      const s = spec(r, "volume");
      return [id(r), s?.tenantId || "-", s?.driver || "-", s?.mountPath || "-", age(r.createdAt)];
    },
    wideHead: ["LABELS"],
    wide: (r) => [labels(r.metadata?.labels)],
  },
  resource_limits: {
    head: ["ID", "CPUS", "MEMORY", "PIDS", "AGE"],
    row: (r) => {
      const s = spec(r, "resourceLimits");
      return [
        id(r),
        s?.cpus ? String(s.cpus) : "-",
        s?.memoryBytes ? bytes(s.memoryBytes) : "-",
        s?.pids ? String(s.pids) : "-",
        age(r.createdAt),
      ];
    },
    wideHead: ["LABELS"],
    wide: (r) => [labels(r.metadata?.labels)],
  },
  freeze: {
    head: ["ID", "SCOPE", "ENDS", "REASON"],
    row: (r) => {
      const s = spec(r, "freeze");
      const scope = Object.keys(s?.nodeSelector ?? {}).length
        ? `nodes ${labels(s?.nodeSelector)}`
        : s?.tenantId
          ? `tenant ${s.tenantId}`
          : "every tenant";
      return [id(r), scope, when(s?.endsAt), cut(s?.reason ?? "", 60)];
    },
    wideHead: ["LABELS"],
    wide: (r) => [labels(r.metadata?.labels)],
  },
  deployment: {
    head: ["ID", "TENANT", "NODE", "PHASE", "RESULT", "AGE"],
    row: (r) => {
      const s = spec(r, "deployment");
      const st = status(r, "deployment");
      return [
        id(r),
        s?.tenantId || "-",
        s?.nodeId || "-",
        enumName(DeploymentPhase, st?.phase ?? 0),
        st?.resultCode || "-",
        age(r.createdAt),
      ];
    },
    wideHead: ["WORK ORDER", "SPEC", "IMAGES", "MESSAGE"],
    wide: (r) => [
      spec(r, "deployment")?.workOrderId || "-",
      (spec(r, "deployment")?.specHash ?? "").slice(0, 12) || "-",
      imageDigests(status(r, "deployment")?.imageDigests ?? {}),
      cut(status(r, "deployment")?.message ?? "", 60),
    ],
  },
  rollout: {
    head: ["ID", "TENANT", "STATUS", "WAVES", "AGE"],
    row: (r) => {
      const ro = status(r, "rollout");
      return [
        id(r),
        ro?.tenantId || spec(r, "rollout")?.tenantId || "-",
        enumName(RolloutStatus, ro?.status ?? 0),
        waveSummary(ro?.waves ?? []),
        age(r.createdAt),
      ];
    },
    wideHead: ["MESSAGE"],
    wide: (r) => [cut(status(r, "rollout")?.message ?? "", 60)],
  },
  artifact: {
    head: ["ID", "TENANT", "SOURCE", "LATEST", "VERSIONS", "AGE"],
    row: (r) => {
      const a = spec(r, "artifact");
      const st = status(r, "artifact");
      return [
        id(r),
        a?.tenantId || "-",
        // An image repository, or where a process archive's versions are ("…/edge-{version}.tar.gz").
        a?.source.case === "image" ? a.source.value.repository : a?.source.case === "processArchive" ? a.source.value.urlTemplate : "-",
        st?.latestVersion || "-",
        String(st?.versions ?? 0),
        age(r.createdAt),
      ];
    },
    wideHead: ["WATCH", "WATCHED", "ERROR"],
    wide: (r) => {
      const w = spec(r, "artifact")?.watch;
      const st = status(r, "artifact");
      const filter = w?.filter.case ? `${w.filter.case === "semverRange" ? "semver" : "pattern"} ${w.filter.value}` : "";
      return [w ? filter || "all tags" : "-", age(st?.watchedAt), cut(st?.watchError ?? "", 60) || "-"];
    },
  },
  artifact_version: {
    head: ["ID", "ARTIFACT", "VERSION", "DIGEST", "BAD", "AGE"],
    row: (r) => {
      const v = spec(r, "artifactVersion");
      return [
        id(r),
        v?.artifactId || "-",
        v?.version || "-",
        (v?.digest ?? "").slice(0, 19) || "-",
        status(r, "artifactVersion")?.markedBad ? "bad" : "-",
        age(r.createdAt),
      ];
    },
    wideHead: ["ORIGIN", "COMMIT", "REASON"],
    wide: (r) => [
      enumName(VersionOrigin, spec(r, "artifactVersion")?.origin ?? 0),
      spec(r, "artifactVersion")?.metadata.commit || "-",
      cut(status(r, "artifactVersion")?.markedBad?.reason ?? "", 60) || "-",
    ],
  },
  delivery: {
    head: ["ID", "GROUPS", "AGE"],
    row: (r) => [id(r), list((spec(r, "delivery")?.releases ?? []).map((g) => g.name)), age(r.createdAt)],
    wideHead: ["LABELS"],
    wide: (r) => [labels(r.metadata?.labels)],
  },
  environment: {
    head: ["ID", "DELIVERY", "CURRENT", "IN FLIGHT", "WAITING FOR"],
    row: (r) => {
      const st = status(r, "environment");
      return [
        id(r),
        spec(r, "environment")?.deliveryId || "-",
        st?.current?.id || "-",
        st?.inFlight ? `${st.inFlight.release?.id ?? ""} ${enumName(PromotionPhase, st.inFlight.phase)}` : "-",
        cut(st?.message ?? "", 60) || "-",
      ];
    },
    wideHead: ["UPSTREAM", "TENANTS", "PINNED", "HELD"],
    wide: (r) => {
      const e = spec(r, "environment");
      const st = status(r, "environment");
      return [
        list((e?.dependsOn ?? []).map((d) => d.environmentId)),
        list([...(e?.tenantIds ?? []), ...(e?.tenantSelector ? [e.tenantSelector] : [])]),
        st?.pin?.release?.id || "-",
        st?.hold ? st.hold.actor : "-",
      ];
    },
  },
  git_source: {
    head: ["ID", "URL", "BRANCH", "COMMIT", "SYNCED", "ERROR"],
    row: (r) => {
      const g = spec(r, "gitSource");
      const st = status(r, "gitSource");
      return [
        id(r),
        cut(g?.url ?? "", 50),
        g?.branch || "main",
        (st?.syncedCommit ?? "").slice(0, 12) || "-",
        age(st?.syncedAt),
        cut(st?.syncError ?? "", 50) || "-",
      ];
    },
    wideHead: ["PATH", "PRUNE", "RESOURCES"],
    wide: (r) => [
      spec(r, "gitSource")?.path || "/",
      spec(r, "gitSource")?.prune ? "yes" : "no",
      String(status(r, "gitSource")?.resources.length ?? 0),
    ],
  },
  process: {
    head: ["ID", "MODULE", "VERSION", "RUN", "NODES", "AGE"],
    row: (r) => {
      const p = spec(r, "process");
      return [
        id(r),
        p?.spec?.module || "-",
        p?.spec?.version || "-",
        p?.run === ProcessModuleRun.STOPPED ? "stopped" : "running",
        cut(status(r, "process")?.summary ?? "", 60) || "-",
        age(r.createdAt),
      ];
    },
    wideHead: ["SELECTOR", "PER NODE"],
    wide: (r) => [
      Object.keys(spec(r, "process")?.nodeSelector ?? {}).length ? labels(spec(r, "process")?.nodeSelector) : "(every node)",
      list(
        (status(r, "process")?.nodes ?? []).map(
          (n) =>
            `${n.nodeId}:${enumName(ProcessModuleReason, n.reason)}${n.activeVersion ? `@${n.activeVersion}` : ""}${n.resolvedOffline ? "(offline)" : ""}`,
        ),
      ),
    ],
  },
  agent_version: {
    head: ["VERSION", "SHA256", "SIZE", "HERE", "NODES", "AGE"],
    row: (r) => {
      const v = spec(r, "agentVersion");
      const s = status(r, "agentVersion");
      return [
        id(r),
        (v?.sha256 ?? "").slice(0, 12) || "-",
        String(v?.size ?? 0),
        s?.available ? "yes" : "no",
        String(s?.nodesRunning ?? 0),
        age(r.createdAt),
      ];
    },
    wideHead: ["NOTES"],
    wide: (r) => [cut(spec(r, "agentVersion")?.notes ?? "", 60) || "-"],
  },
  agent_update: {
    head: ["ID", "VERSION", "CURRENT", "ROLLOUT", "PAUSED", "AGE"],
    row: (r) => {
      const u = spec(r, "agentUpdate");
      const s = status(r, "agentUpdate");
      return [
        id(r),
        u?.version || "-",
        s ? `${s.nodesCurrent}/${s.nodesSelected}` : "-",
        s?.rolloutId || "-",
        u?.paused ? "yes" : "no",
        age(r.createdAt),
      ];
    },
    wideHead: ["SELECTOR", "MESSAGE"],
    wide: (r) => [
      Object.keys(spec(r, "agentUpdate")?.nodeSelector ?? {}).length ? labels(spec(r, "agentUpdate")?.nodeSelector) : "(every node)",
      cut(status(r, "agentUpdate")?.message ?? "", 60) || "-",
    ],
  },
};

/** The table of `resources` (all of `type`). */
export function resourceTable(type: ResourceType, resources: Resource[], wide: boolean, io: Pick<Io, "color">): string {
  const c = COLUMNS[type];
  const head = wide ? [...c.head, ...c.wideHead] : c.head;
  return table(
    head,
    resources.map((r) => (wide ? [...c.row(r, io), ...c.wide(r)] : c.row(r, io))),
  );
}

/** The nodes a tenant is placed on (its target records that want something there). */
export function tenantNodes(r: Resource): string[] {
  return (status(r, "tenant")?.targets ?? []).filter((t) => t.desiredHash !== "").map((t) => t.nodeId);
}

/** A node's placement labels: the admin's (spec and metadata). */
export function nodeLabels(r: Resource): Record<string, string> {
  return { ...(r.metadata?.labels ?? {}), ...(spec(r, "node")?.labels ?? {}) };
}

function liveness(r: Resource, io: Pick<Io, "color">): string {
  const name = livenessName(status(r, "node")?.liveness);
  return name === "NEVER_SEEN" ? name : paint(io, name === "ONLINE" ? "green" : name === "DEGRADED" ? "yellow" : "red", name);
}

/** `canary 1/1, rest 0/3`: nodes done per wave. */
export function waveSummary(waves: { name: string; nodes: { state: RolloutNodeState }[] }[]): string {
  return list(waves.map((w) => `${w.name} ${w.nodes.filter((n) => n.state === RolloutNodeState.DONE).length}/${w.nodes.length}`));
}

function bytes(n: bigint): string {
  const v = Number(n);
  for (const [unit, size] of [
    ["Gi", 2 ** 30],
    ["Mi", 2 ** 20],
    ["Ki", 2 ** 10],
  ] as const) {
    if (v >= size && v % size === 0) return `${v / size}${unit}`;
  }
  return String(v);
}

/** The digests a node runs, short: "reg/web:stable@sha256:0123456789ab" (the whole ones with -o yaml). */
function imageDigests(digests: Record<string, string>): string {
  const out = Object.entries(digests)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([ref, d]) => `${ref}@${d.slice(0, 19)}`);
  return out.join(", ") || "-";
}
