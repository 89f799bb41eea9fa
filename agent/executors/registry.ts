// Which executor runs which order type. One table, so what an agent can do is one look away; its
// type (executor-table.ts) makes the compiler check each executor runs its type's action.
import { hostProxyFor } from "../proxy/proxy-settings.js";
import { WorkOrderType } from "../../gen/skipper/v1/work_order_pb.js";
import { controlContainer } from "./control-container.js";
import { controlProcess } from "./control-process.js";
import { deployContainer } from "./deploy-container.js";
import { deployContext } from "./deploy-context.js";
import { deployProcess } from "./deploy-process.js";
import { sourceRefusal } from "./deploy-processes.js";
import { deployService } from "./deploy-service.js";
import { deliverWebhook } from "./deliver-webhook.js";
import { executeCommand } from "./execute-command.js";
import { execService } from "./exec-service.js";
import type { ExecutorTable } from "./executor-table.js";
import { executorOf, orderOutcome, stateExecutor } from "./executor.js";
import { healthCheck, inspect } from "./node-checks.js";
import { restartService, rollbackProject } from "./project-orders.js";
import { removeService } from "./remove-service.js";
import { readSticker, writeSticker } from "./sticker.js";
import { readLogs } from "./read-logs.js";
import { uploadFiles } from "./upload-files.js";
import { updateAgent } from "./update-agent.js";

/** The executors of every order type, as this agent runs them. */
export function executors(): ExecutorTable {
  return {
    [WorkOrderType.DEPLOY_SERVICE]: stateExecutor((order, ctx) => deployService(order, deployContext(ctx))),
    [WorkOrderType.REMOVE_SERVICE]: stateExecutor((order, { config, host }) =>
      removeService(order, {
        workDir: config.workDir,
        docker: host,
        composeTimeoutMs: config.composeTimeoutMs,
        proxy: config.proxy ? hostProxyFor(config.proxy) : undefined,
      }),
    ),
    [WorkOrderType.RESTART_SERVICE]: restartService,
    [WorkOrderType.ROLLBACK]: rollbackProject,
    [WorkOrderType.HEALTH_CHECK]: healthCheck,
    [WorkOrderType.INSPECT]: inspect,
    [WorkOrderType.EXECUTE_COMMAND]: executeCommand,
    [WorkOrderType.UPLOAD_FILES]: uploadFiles,
    [WorkOrderType.WRITE_STICKER]: writeSticker,
    [WorkOrderType.READ_STICKER]: readSticker,
    [WorkOrderType.READ_LOGS]: readLogs,
    [WorkOrderType.EXEC_SERVICE]: execService,
    [WorkOrderType.DEPLOY_PROCESS]: executorOf("deployProcess", (action, order, ctx) => {
      // It runs what it installs: only from sources the operator allowed on this host (a
      // deploy_service's process modules are held to the same rule: deploy-processes.ts).
      const refused = sourceRefusal(action?.spec?.source, ctx.config.allowProcessSources);
      if (!refused) return deployProcess(order, ctx);
      return Promise.resolve(orderOutcome("PROCESS_SOURCE_NOT_ALLOWED", refused, performance.now(), { success: false }));
    }),
    [WorkOrderType.CONTROL_PROCESS]: controlProcess,
    [WorkOrderType.DEPLOY_CONTAINER]: deployContainer,
    [WorkOrderType.CONTROL_CONTAINER]: controlContainer,
    [WorkOrderType.DELIVER_WEBHOOK]: deliverWebhook,
    [WorkOrderType.UPDATE_AGENT]: updateAgent,
  };
}
