// CreateWorkOrder's rules: which order types an admin may queue, what each one's action must hold,
// and the order built from a request that passed. Pure apart from the facts passed in (the node,
// the tenant): the service looks those up, calls check, then stores what build returns.
import { durationMs, timestampDate } from "@bufbuild/protobuf/wkt";
import { ProcessOperation } from "../../gen/skipper/v1/order_action_pb.js";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import { WorkOrderType, type WorkOrder, type WorkOrderDesiredState } from "../../gen/skipper/v1/work_order_pb.js";
import { invalid } from "../errors.js";
import { pendingOrder } from "../reconcile/plan-deployment.js";
import { checkId } from "../id-checks.js";
import { ACTION_OF_TYPE, type OrderType } from "../../common/order-actions.js";
import { createHash } from "node:crypto";
import {
  COMPOSE_SERVICE,
  ENV_KEY,
  MODULE_NAME,
  MODULE_VERSION,
  SHA256_HEX,
  uploadPathProblem,
  urlProblem,
} from "../../common/action-rules.js";
import { checkCommandSpec, checkProbe } from "../resources/safety-rules.js";

/** The types an admin may queue, and whether each order names a tenant; its action member is ACTION_OF_TYPE's. */
const TENANT_OF_TYPE: Partial<Record<WorkOrderType, "required" | "optional" | "none">> = {
  [WorkOrderType.RESTART_SERVICE]: "required",
  [WorkOrderType.ROLLBACK]: "required",
  [WorkOrderType.HEALTH_CHECK]: "optional",
  [WorkOrderType.INSPECT]: "optional",
  [WorkOrderType.EXECUTE_COMMAND]: "none",
  [WorkOrderType.UPLOAD_FILES]: "optional",
  [WorkOrderType.WRITE_STICKER]: "required",
  [WorkOrderType.READ_STICKER]: "required",
  [WorkOrderType.DEPLOY_PROCESS]: "none",
  [WorkOrderType.CONTROL_PROCESS]: "none",
  [WorkOrderType.READ_LOGS]: "required",
};

const MAX_TIMEOUT_MS = 24 * 60 * 60 * 1000;
const MAX_UPLOAD_BYTES = 8 * 1024 * 1024;
const MAX_FILES = 100;

/** Checks the request's shape: type, target ids, action, limits. Throws INVALID_REQUEST. */
export function checkRequest(req: CreateWorkOrderRequest, now: Date): void {
  const tenant = TENANT_OF_TYPE[req.type];
  const action = ACTION_OF_TYPE[req.type as OrderType];
  if (!tenant || !action) {
    const reconciled = req.type === WorkOrderType.DEPLOY_SERVICE || req.type === WorkOrderType.REMOVE_SERVICE;
    throw invalid(
      reconciled
        ? `${WorkOrderType[req.type]} orders come from the reconciler: change the desired state or call Apply`
        : `unknown or unsupported work order type ${req.type}`,
      { field: "type" },
    );
  }
  checkId(req.target?.nodeId ?? "", "target.node_id");
  const tenantId = req.target?.tenantId ?? "";
  if (tenant === "required" || tenantId !== "") checkId(tenantId, "target.tenant_id");
  if (tenant === "none" && tenantId !== "")
    throw invalid(`${WorkOrderType[req.type]} orders are for a node, not a tenant`, { field: "target.tenant_id" });
  if (req.action?.kind.case !== action) {
    throw invalid(`a ${WorkOrderType[req.type]} order carries action.${snake(action)}`, {
      field: "action",
      got: snake(req.action?.kind.case ?? ""),
    });
  }
  if (req.timeout) {
    const ms = durationMs(req.timeout);
    if (ms <= 0 || ms > MAX_TIMEOUT_MS) throw invalid("timeout must be positive and at most 24h", { field: "timeout" });
  }
  if (req.expiresAt && timestampDate(req.expiresAt) <= now) throw invalid("expires_at must be in the future", { field: "expires_at" });
  if (req.maxAttempts < 0 || req.maxAttempts > 10) throw invalid("max_attempts must be 0-10", { field: "max_attempts" });
  if (Math.abs(req.priority) > 1_000_000) throw invalid("priority must be within ±1000000", { field: "priority" });
  checkAction(req);
}

function checkAction(req: CreateWorkOrderRequest): void {
  const a = req.action!.kind;
  switch (a.case) {
    case "restartService":
      a.value.services.forEach(
        (s, i) => COMPOSE_SERVICE.test(s) || fail(`action.restart_service.services[${i}]`, "is not a compose service name"),
      );
      return;
    case "rollback":
      if (a.value.deploymentId !== "") checkId(a.value.deploymentId, "action.rollback.deployment_id");
      return;
    case "healthCheck":
      if (a.value.probes.length === 0 && (req.target?.tenantId ?? "") === "")
        fail("action.health_check.probes", "are required when the order names no tenant");
      a.value.probes.forEach((p, i) => checkProbe(p, `action.health_check.probes[${i}]`));
      return;
    case "executeCommand":
      checkCommandSpec(a.value.command, "action.execute_command.command");
      return;
    case "readLogs":
      a.value.services.forEach(
        (s, i) => COMPOSE_SERVICE.test(s) || fail(`action.read_logs.services[${i}]`, "is not a compose service name"),
      );
      if (a.value.tailLines > 5000) fail("action.read_logs.tail_lines", "must be at most 5000");
      return;
    case "uploadFiles": {
      const files = a.value.files;
      if (files.length === 0 || files.length > MAX_FILES) fail("action.upload_files.files", `must hold 1-${MAX_FILES} files`);
      if (files.reduce((n, f) => n + f.content.length, 0) > MAX_UPLOAD_BYTES)
        fail("action.upload_files.files", `must hold at most ${MAX_UPLOAD_BYTES} bytes in all`);
      const seen = new Set<string>();
      files.forEach((f, i) => {
        const field = `action.upload_files.files[${i}]`;
        const p = uploadPathProblem(f.path, (req.target?.tenantId ?? "") !== "");
        if (p) fail(`${field}.path`, p);
        if (seen.has(f.path)) fail(`${field}.path`, "appears twice");
        seen.add(f.path);
        if (!SHA256_HEX.test(f.sha256)) fail(`${field}.sha256`, "must be 64 hex digits");
        if (createHash("sha256").update(f.content).digest("hex") !== f.sha256.toLowerCase())
          fail(`${field}.sha256`, "does not match the content");
        if (f.mode > 0o1777) fail(`${field}.mode`, "must be permission bits (at most 01777; setuid and setgid are refused)");
        for (const [k, v] of [
          ["owner", f.owner],
          ["group", f.group],
        ] as const)
          if (v !== "" && !/^[A-Za-z0-9._-]{1,32}$/.test(v)) fail(`${field}.${k}`, "must be a name or number");
      });
      return;
    }
    case "writeSticker": {
      const s = a.value.sticker;
      if ((s?.releaseId ?? "").length > 200 || (s?.deploymentId ?? "").length > 200)
        fail("action.write_sticker.sticker", "release_id and deployment_id are at most 200 characters");
      for (const [k, v] of Object.entries(s?.imageDigests ?? {}))
        if (!COMPOSE_SERVICE.test(k) || v.length > 200)
          fail("action.write_sticker.sticker.image_digests", `entry ${JSON.stringify(k)} is not a service name with a digest`);
      return;
    }
    case "deployProcess": {
      const s = a.value.spec;
      const f = "action.deploy_process.spec";
      if (!s) fail(f, "is required");
      if (!MODULE_NAME.test(s.module)) fail(`${f}.module`, `must match ${MODULE_NAME.source}`);
      if (s.version !== "latest" && (!MODULE_VERSION.test(s.version) || s.version === "active"))
        fail(`${f}.version`, `must match ${MODULE_VERSION.source} or be "latest"`);
      if (!SHA256_HEX.test(s.sha256)) fail(`${f}.sha256`, "must be 64 hex digits");
      if (s.source?.kind.case === "path") {
        if (!s.source.kind.value.startsWith("/") || s.source.kind.value.split("/").includes(".."))
          fail(`${f}.source.path`, "must be an absolute path without '..'");
      } else if (s.source?.kind.case === "url") {
        const p = urlProblem(s.source.kind.value);
        if (p) fail(`${f}.source.url`, p);
      } else fail(`${f}.source`, "needs a path or a url");
      if (s.argv.length === 0 || s.argv[0] === "" || s.argv[0]!.startsWith("/") || s.argv[0]!.split("/").includes(".."))
        fail(`${f}.argv`, "argv[0] must be a path inside the version directory");
      for (const k of Object.keys(s.env)) if (!ENV_KEY.test(k)) fail(`${f}.env`, `${JSON.stringify(k)} is not a variable name`);
      return;
    }
    case "controlProcess":
      if (!MODULE_NAME.test(a.value.module)) fail("action.control_process.module", `must match ${MODULE_NAME.source}`);
      if (!(a.value.operation in ProcessOperation) || a.value.operation === ProcessOperation.UNSPECIFIED)
        fail("action.control_process.operation", "must be START, STOP, RESTART or ROLLBACK");
      if (a.value.version !== "" && !MODULE_VERSION.test(a.value.version))
        fail("action.control_process.version", `must match ${MODULE_VERSION.source}`);
      return;
    case "inspect":
    case "readSticker":
      // These actions carry no fields.
      return;
    case undefined:
      return;
    default:
      // Every action of the contract has a case above: the compiler refuses a new one without.
      uncheckedAction(a);
  }
}

function uncheckedAction(a: never): never {
  throw new Error(`no request rules for action ${JSON.stringify((a as { case?: unknown }).case)}`);
}

/** The pending order for a checked request. */
export function buildOrder(
  req: CreateWorkOrderRequest,
  ids: { id: string; requestId: string; correlationId: string; traceparent?: string; now: Date },
  desiredState?: WorkOrderDesiredState,
): WorkOrder {
  return pendingOrder({
    id: ids.id,
    type: req.type,
    target: { tenantId: req.target?.tenantId ?? "", nodeId: req.target?.nodeId ?? "" },
    trace: { requestId: ids.requestId, correlationId: ids.correlationId, traceparent: ids.traceparent ?? "" },
    now: ids.now,
    reason: "ad_hoc",
    desiredState,
    action: req.action,
    maxAttempts: req.maxAttempts || 1,
    priority: req.priority,
    timeout: req.timeout,
    expiresAt: req.expiresAt,
  });
}

function fail(field: string, problem: string): never {
  throw invalid(`${field} ${problem}`, { field });
}

function snake(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
