// The executor table: every order type has the executor of the action it carries, and an order
// whose action is missing or of another kind is refused by its type's executor in that
// executor's own words, the codes and messages the agent gave before the table was typed.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NodeCapabilitiesSchema } from "../gen/skipper/v1/resource_pb.js";
import { WorkOrderSchema, WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import type { ExecContext } from "../agent/executors/executor.js";
import { executorFor } from "../agent/executors/executor-table.js";
import { ORDER_KINDS, ORDER_TYPES, type OrderType } from "../common/order-kinds.js";
import { executors } from "../agent/executors/registry.js";

let workDir: string;
beforeEach(async () => {
  workDir = await mkdtemp(join(tmpdir(), "skippy-table-"));
});
afterEach(async () => rm(workDir, { recursive: true, force: true }));

const ctx = (): ExecContext => ({
  config: { workDir, composeTimeoutMs: 5000, readyTimeoutMs: 1000, allowCommands: ["true"], allowProcessSources: [] },
  host: { capabilities: create(NodeCapabilitiesSchema, {}) },
  log: pino({ level: "silent" }),
  signal: new AbortController().signal,
});
type Action = MessageInitShape<typeof WorkOrderSchema>["action"];
const run = async (type: WorkOrderType, action: Action) => {
  const order = create(WorkOrderSchema, { id: "o-1", type, target: { tenantId: "t1", nodeId: "n1" }, action });
  return (await executorFor(executors(), type)!(order, ctx())).result;
};
const command: Action = { kind: { case: "executeCommand", value: { command: { argv: ["true"] } } } };
const files: Action = { kind: { case: "uploadFiles", value: { files: [{ path: "a.txt", content: new Uint8Array(), sha256: "" }] } } };

describe("executor table", () => {
  it("files under every order type the executor of the action that type carries", () => {
    const table = executors();
    const types = [...ORDER_TYPES];
    expect(types.sort((a, b) => a - b)).toEqual(
      Object.values(WorkOrderType).filter((v): v is OrderType => typeof v === "number" && v !== WorkOrderType.UNSPECIFIED),
    );
    for (const t of types) expect([WorkOrderType[t], executorFor(table, t)?.action]).toEqual([WorkOrderType[t], ORDER_KINDS[t].action]);
  });

  it("has no executor for UNSPECIFIED or a type newer than this agent (the loop answers UNSUPPORTED_ORDER_TYPE)", () => {
    expect(executorFor(executors(), WorkOrderType.UNSPECIFIED)).toBeUndefined();
    expect(executorFor(executors(), 99 as WorkOrderType)).toBeUndefined();
  });

  it("an order whose action is of another kind than its type's is refused as one without action", async () => {
    expect(await run(WorkOrderType.EXECUTE_COMMAND, files)).toMatchObject({
      success: false,
      code: "COMMAND_INVALID",
      message: "the order carries no command (action.execute_command.command.argv)",
    });
    expect(await run(WorkOrderType.UPLOAD_FILES, command)).toMatchObject({
      success: false,
      code: "UPLOAD_INVALID",
      message: "the order carries no files (action.upload_files.files)",
    });
    expect(await run(WorkOrderType.WRITE_STICKER, command)).toMatchObject({
      success: false,
      code: "STICKER_INVALID",
      message: "the order carries no sticker (action.write_sticker.sticker)",
    });
    expect(await run(WorkOrderType.CONTROL_PROCESS, command)).toMatchObject({
      success: false,
      code: "PROCESS_INVALID",
      message: "the order has no control_process action",
    });
    expect(await run(WorkOrderType.DEPLOY_PROCESS, command)).toMatchObject({
      success: false,
      code: "PROCESS_SOURCE_NOT_ALLOWED",
      message: "no source is not under this node's --allow-process-source (none)",
    });
    // With its own kind the same order passes the first check.
    expect((await run(WorkOrderType.EXECUTE_COMMAND, command)).code).toBe("COMMAND_OK");
  });

  it("an order without action is refused the same way", async () => {
    expect(await run(WorkOrderType.EXECUTE_COMMAND, undefined)).toMatchObject({ code: "COMMAND_INVALID" });
    expect(await run(WorkOrderType.UPLOAD_FILES, undefined)).toMatchObject({ code: "UPLOAD_INVALID" });
    expect(await run(WorkOrderType.CONTROL_PROCESS, undefined)).toMatchObject({
      code: "PROCESS_INVALID",
      message: "the order has no control_process action",
    });
  });
});
