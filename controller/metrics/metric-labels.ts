// The values a metric's labels may take. Each comes from a small fixed set (enum names, the
// result codes the contract lists, RPC names), so the number of series never grows with tenants,
// orders, nodes or anything a caller or a node sends. Ids and free text are never label values.
import type { DescMethod } from "@bufbuild/protobuf";
import type { Code } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";

// Every code a work order's result may carry by the contract (work_order.proto, WorkOrderResult)
// and what the agent and the controller set themselves. A node may report any UPPER_SNAKE_CASE
// code; one outside this list is counted as OTHER.
const RESULT_CODES = new Set([
  // Any type
  "TIMEOUT",
  "CANCELLED",
  "EXPIRED",
  "SUPERSEDED",
  "UNSUPPORTED_ORDER_TYPE",
  "AGENT_ERROR",
  "AGENT_RESTARTED",
  "LEASE_LOST",
  "SECRETS_UNAVAILABLE",
  // deploy_service, rollback
  "APPLY_OK",
  "COMPOSE_INVALID",
  "DOCKER_UNAVAILABLE",
  "COMPOSE_FAILED",
  "SERVICES_NOT_RUNNING",
  "PRE_DEPLOY_FAILED",
  "POST_DEPLOY_FAILED",
  "ROLLED_BACK",
  "HEALTH_GATE_FAILED",
  "DIGEST_MISMATCH",
  "PROXY_UNAVAILABLE",
  "PROXY_REFUSED",
  "ROLLBACK_FAILED",
  "ROLLBACK_OK",
  "IMAGE_PULL_FAILED",
  "IMAGE_NOT_FOUND",
  // read_logs
  "LOGS_OK",
  "LOGS_INVALID",
  // remove_service, restart_service
  "REMOVE_OK",
  "REMOVE_INVALID",
  "REMOVE_FAILED",
  "RESTART_OK",
  "RESTART_INVALID",
  "PROJECT_NOT_FOUND",
  // health_check, inspect
  "HEALTHY",
  "UNHEALTHY",
  "INSPECT_OK",
  // execute_command
  "COMMAND_OK",
  "COMMAND_FAILED",
  "COMMAND_NOT_ALLOWED",
  "COMMAND_NOT_FOUND",
  "COMMAND_INVALID",
  // upload_files
  "UPLOAD_OK",
  "UPLOAD_INVALID",
  "CHECKSUM_MISMATCH",
  "UPLOAD_FAILED",
  // write_sticker, read_sticker
  "STICKER_OK",
  "STICKER_MISSING",
  "STICKER_INVALID",
  // deploy_process, control_process
  "PROCESS_OK",
  "PROCESS_INVALID",
  "SOURCE_UNAVAILABLE",
  "PROCESS_EXITED",
  "PROCESS_FAILED",
  "MODULE_NOT_INSTALLED",
  "VERSION_NOT_INSTALLED",
  "PROCESS_SOURCE_NOT_ALLOWED",
]);

/** A result code as a label: itself when the contract knows it, else "OTHER" ("" when none). */
export function resultCodeLabel(code: string | undefined): string {
  if (!code) return "";
  return RESULT_CODES.has(code) ? code : "OTHER";
}

/**
 * An enum value as a label: its name in lowercase without the type's prefix ("deploy_service"
 * for WorkOrderType.DEPLOY_SERVICE), "unspecified" for 0 and "unknown" for a number the enum
 * does not name (from a newer peer).
 */
export function enumLabel(names: Record<number, string>, value: number): string {
  return (names[value] ?? "UNKNOWN").toLowerCase();
}

/** The service and method labels of an RPC ("skipper.v1.NodeService", "Heartbeat"). */
export function rpcLabels(method: DescMethod): { service: string; method: string } {
  return { service: method.parent.typeName, method: method.name };
}

/** A Connect code as a label ("not_found"); "ok" for none. */
export function codeLabel(code: Code | undefined): string {
  return code === undefined ? "ok" : codeToString(code);
}
