// The executors of an SSH node: the agent's own, for the kinds that only talk to the engine (the
// relay's commands reach the node's engine through the bridge, engine-bridge.ts), each behind a
// check of the SSH connection: an order on a node whose host key no longer matches, whose login
// is refused or that cannot be reached fails with that reason (HOST_KEY_MISMATCH,
// SSH_AUTH_FAILED, SSH_UNREACHABLE, SSH_KEY_UNAVAILABLE) and the connection's status in
// details.ssh, before anything runs. Process modules (deploy_process, control_process) run on the
// node too, with executors of their own (ssh-process-executors.ts) behind the same check; a
// deploy_service's process modules do not (they would run on the relay) and are refused. The kinds
// that act on the host itself (commands, files, stickers, single containers, probes from the
// host) are refused with the reason: they would run on the relay, not on the node.
import { WorkOrderType, type WorkOrder } from "../../gen/skipper/v1/work_order_pb.js";
import { SshTargetState, type SshTargetStatus } from "../../gen/skipper/v1/resource_pb.js";
import type { OrderType } from "../../common/order-kinds.js";
import type { ExecutorTable } from "../executors/executor-table.js";
import { orderOutcome, type ExecContext, type ExecOutcome, type Executor } from "../executors/executor.js";
import { relayDiskPaths } from "./remote-files.js";

/** The kinds an SSH node runs: those whose every step is an engine call. */
export const SSH_ORDER_TYPES: ReadonlySet<OrderType> = new Set([
  WorkOrderType.DEPLOY_SERVICE,
  WorkOrderType.REMOVE_SERVICE,
  WorkOrderType.RESTART_SERVICE,
  WorkOrderType.ROLLBACK,
  WorkOrderType.INSPECT,
  WorkOrderType.READ_LOGS,
  WorkOrderType.EXEC_SERVICE,
  WorkOrderType.DEPLOY_PROCESS,
  WorkOrderType.CONTROL_PROCESS,
]);

const FAILURE_CODES: Partial<Record<SshTargetState, string>> = {
  [SshTargetState.HOST_KEY_MISMATCH]: "HOST_KEY_MISMATCH",
  [SshTargetState.AUTH_FAILED]: "SSH_AUTH_FAILED",
  [SshTargetState.UNREACHABLE]: "SSH_UNREACHABLE",
  [SshTargetState.KEY_UNAVAILABLE]: "SSH_KEY_UNAVAILABLE",
};

/**
 * The table of an SSH node: SSH_ORDER_TYPES behind `check`, each run by `own`'s executor when it
 * has one (the node's process executors), else by `all`'s; the others refused.
 */
export function sshExecutors(
  all: ExecutorTable,
  nodeId: string,
  check: () => Promise<SshTargetStatus>,
  own: Partial<ExecutorTable> = {},
): ExecutorTable {
  const out: Partial<Record<OrderType, Executor>> = {};
  for (const [key, exec] of Object.entries(all) as [string, Executor][]) {
    const type = Number(key) as OrderType;
    const mine = (own as Partial<Record<OrderType, Executor>>)[type] ?? exec;
    out[type] = SSH_ORDER_TYPES.has(type) ? guarded(mine, check, nodeId) : refused(exec, nodeId);
  }
  return out as ExecutorTable;
}

/** Whether an SSH node's table (sshExecutors of `all`) runs `type`: the refused kinds count as absent. */
export function sshRuns(all: Partial<ExecutorTable>, type: WorkOrderType): boolean {
  return SSH_ORDER_TYPES.has(type as OrderType) && (all as Partial<Record<WorkOrderType, Executor>>)[type] !== undefined;
}

function guarded(exec: Executor, check: () => Promise<SshTargetStatus>, nodeId: string): Executor {
  const run = async (order: WorkOrder, ctx: ExecContext): Promise<ExecOutcome> => {
    const started = performance.now();
    const ssh = await check();
    const code = FAILURE_CODES[ssh.state];
    if (code) {
      const retriable = ssh.state === SshTargetState.UNREACHABLE;
      return orderOutcome(code, ssh.message, started, { success: false, retriable, details: { ssh } });
    }
    const paths = relayDiskPaths(order);
    if (paths.length > 0) {
      const message = `an SSH node's engine cannot mount files from the relay's disk; use absolute paths on the node or named volumes: ${paths.join(", ")}`;
      return orderOutcome("SSH_RELAY_FILES_REFUSED", message.slice(0, 2000), started, { success: false });
    }
    const modules = order.desiredState?.processes.map((p) => p.module) ?? [];
    if (order.type === WorkOrderType.DEPLOY_SERVICE && modules.length > 0) {
      const message = `a deploy's process modules (${modules.join(", ")}) do not run on SSH node ${nodeId}: they would run on the relay; deploy them to the node with a process resource or deploy_process orders`;
      return orderOutcome("SSH_RELAY_PROCESSES_REFUSED", message.slice(0, 2000), started, { success: false });
    }
    return exec(order, ctx);
  };
  return Object.assign(run, { action: exec.action });
}

function refused(exec: Executor, nodeId: string): Executor {
  const run = async (order: WorkOrder): Promise<ExecOutcome> =>
    orderOutcome(
      "UNSUPPORTED_ORDER_TYPE",
      `${WorkOrderType[order.type] ?? order.type} orders do not run on SSH node ${nodeId}: they act on the host itself, and an SSH node's relay reaches only its Docker engine`,
      performance.now(),
      { success: false },
    );
  return Object.assign(run, { action: exec.action });
}
