// The request rules of each ad-hoc order's action, and what a node must permit of it: one
// function per kind, filed by kind in order-kinds.ts. A rule failure is INVALID_REQUEST naming
// the field; a node that does not permit the action is CONFLICT with a machine-readable reason
// (the agent checks again: it is the authority over its host; refusing here saves a round trip
// and says why).
import { createHash } from "node:crypto";
import { durationMs } from "@bufbuild/protobuf/wkt";
import {
  ContainerOperation,
  ProcessOperation,
  type ControlContainerAction,
  type DeployContainerAction,
  type ControlProcessAction,
  type DeployProcessAction,
  type ExecServiceAction,
  type ExecuteCommandAction,
  type HealthCheckAction,
  type ReadLogsAction,
  type RestartServiceAction,
  type RollbackAction,
  type UploadFilesAction,
  type WriteStickerAction,
} from "../../gen/skipper/v1/order_action_pb.js";
import type { NodeCapabilities } from "../../gen/skipper/v1/resource_pb.js";
import type { CreateWorkOrderRequest } from "../../gen/skipper/v1/work_order_service_pb.js";
import {
  COMPOSE_SERVICE,
  execActionProblem,
  MODULE_NAME,
  MODULE_VERSION,
  processSourceAllowed,
  SHA256_HEX,
  uploadPathProblem,
} from "../../common/action-rules.js";
import { containerNameProblem, containerSpecProblem } from "../../common/container-rules.js";
import { conflict, invalid } from "../base/errors.js";
import { checkId } from "../base/id-checks.js";
import { checkCommandSpec, checkProbe } from "../resources/safety-rules.js";
import { checkProcessSpec } from "../resources/process-rules.js";

const MAX_UPLOAD_BYTES = 8 * 1024 * 1024;
const MAX_FILES = 100;

export function checkRestartService(a: RestartServiceAction): void {
  a.services.forEach((s, i) => COMPOSE_SERVICE.test(s) || fail(`action.restart_service.services[${i}]`, "is not a compose service name"));
}

export function checkRollback(a: RollbackAction): void {
  if (a.deploymentId !== "") checkId(a.deploymentId, "action.rollback.deployment_id");
}

export function checkHealthCheck(a: HealthCheckAction, req: CreateWorkOrderRequest): void {
  if (a.probes.length === 0 && (req.target?.tenantId ?? "") === "")
    fail("action.health_check.probes", "are required when the order names no tenant");
  a.probes.forEach((p, i) => checkProbe(p, `action.health_check.probes[${i}]`));
}

export function checkExecuteCommand(a: ExecuteCommandAction): void {
  checkCommandSpec(a.command, "action.execute_command.command");
}

export function checkReadLogs(a: ReadLogsAction): void {
  a.services.forEach((s, i) => COMPOSE_SERVICE.test(s) || fail(`action.read_logs.services[${i}]`, "is not a compose service name"));
  if (a.tailLines > 5000) fail("action.read_logs.tail_lines", "must be at most 5000");
}

export function checkExecService(a: ExecServiceAction): void {
  const p = execActionProblem(a);
  if (p) fail(p.field, p.problem);
  if (a.replica > 1000) fail("action.exec_service.replica", "must be at most 1000");
}

const MAX_READY_MS = 30 * 60 * 1000;

export function checkDeployContainer(a: DeployContainerAction): void {
  if (!a.spec) fail("action.deploy_container.spec", "is required");
  const p = containerSpecProblem(a.spec, "action.deploy_container.spec");
  if (p) fail(p.field, p.problem);
  const ready = a.spec.readyTimeout ? durationMs(a.spec.readyTimeout) : 60_000;
  if (ready <= 0 || ready > MAX_READY_MS) fail("action.deploy_container.spec.ready_timeout", "must be more than 0 and at most 30m");
  const settle = a.spec.settle ? durationMs(a.spec.settle) : 0;
  if (settle < 0 || settle >= ready) fail("action.deploy_container.spec.settle", "must be at least 0 and less than ready_timeout");
}

export function checkControlContainer(a: ControlContainerAction): void {
  const p = containerNameProblem(a.name);
  if (p) fail("action.control_container.name", p);
  if (!(a.operation in ContainerOperation) || a.operation === ContainerOperation.UNSPECIFIED)
    fail("action.control_container.operation", "must be ROLLBACK or REMOVE");
}

export function checkUploadFiles(a: UploadFilesAction, req: CreateWorkOrderRequest): void {
  const files = a.files;
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
}

export function checkWriteSticker(a: WriteStickerAction): void {
  const s = a.sticker;
  if ((s?.releaseId ?? "").length > 200 || (s?.deploymentId ?? "").length > 200)
    fail("action.write_sticker.sticker", "release_id and deployment_id are at most 200 characters");
  for (const [k, v] of Object.entries(s?.imageDigests ?? {}))
    if (!COMPOSE_SERVICE.test(k) || v.length > 200)
      fail("action.write_sticker.sticker.image_digests", `entry ${JSON.stringify(k)} is not a service name with a digest`);
}

export function checkDeployProcess(a: DeployProcessAction): void {
  checkProcessSpec(a.spec, "action.deploy_process.spec");
}

export function checkControlProcess(a: ControlProcessAction): void {
  if (!MODULE_NAME.test(a.module)) fail("action.control_process.module", `must match ${MODULE_NAME.source}`);
  if (!(a.operation in ProcessOperation) || a.operation === ProcessOperation.UNSPECIFIED)
    fail("action.control_process.operation", "must be START, STOP, RESTART or ROLLBACK");
  if (a.version !== "" && !MODULE_VERSION.test(a.version)) fail("action.control_process.version", `must match ${MODULE_VERSION.source}`);
}

/** A process source the node reported it does not allow. */
export function permitsProcessSource(a: DeployProcessAction, nodeId: string, caps: NodeCapabilities | undefined): void {
  if (!caps) return;
  const source = a.spec?.source?.kind ?? { case: undefined };
  if (processSourceAllowed(source, caps.allowedProcessSources)) return;
  throw conflict(
    `the artifact source is not under node ${nodeId}'s allowed process sources (${caps.allowedProcessSources.join(", ") || "none"}); the agent's --allow-process-source sets them`,
    { field: "action.deploy_process.spec.source", node_id: nodeId, reason: "PROCESS_SOURCE_NOT_ALLOWED" },
  );
}

/** A program not on the node's reported allow-list. */
export function permitsCommand(a: ExecuteCommandAction, nodeId: string, caps: NodeCapabilities | undefined): void {
  const program = a.command?.argv[0] ?? "";
  if (!caps || caps.allowedCommands.includes(program)) return;
  throw conflict(
    `${JSON.stringify(program)} is not on node ${nodeId}'s allow-list (${caps.allowedCommands.join(", ") || "empty"}); the agent's --allow-command sets it`,
    { field: "action.execute_command.command.argv", node_id: nodeId, reason: "COMMAND_NOT_ALLOWED" },
  );
}

function fail(field: string, problem: string): never {
  throw invalid(`${field} ${problem}`, { field });
}
