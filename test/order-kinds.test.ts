// The order-kind tables against the contract, over every kind, so a new kind is in these tests
// by being in the tables: each WorkOrderType has a kind; a kind queued on request refuses an
// action of another member, and refuses an action whose fields are all hostile (so a kind whose
// check lets anything through fails here); a kind that declares "no fields" carries an action
// message that has none; a reconciler's kind is refused with what to do instead.
import { create, type DescMessage, type Message } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ORDER_KINDS, ORDER_TYPES, type OrderType } from "../common/order-kinds.js";
import { checkRequest } from "../controller/dispatch/ad-hoc-order.js";
import { CONTROLLER_ORDER_KINDS } from "../controller/dispatch/order-kinds.js";
import { isSkipperError } from "../controller/base/errors.js";
import { WorkOrderActionSchema } from "../gen/skipper/v1/order_action_pb.js";
import { WorkOrderType } from "../gen/skipper/v1/work_order_pb.js";
import { CreateWorkOrderRequestSchema } from "../gen/skipper/v1/work_order_service_pb.js";

const actionField = (c: string) => WorkOrderActionSchema.oneofs.find((o) => o.name === "kind")!.fields.find((f) => f.localName === c)!;
const NOW = new Date("2026-11-28T12:00:00Z");
// Too long for any name, with a path escape, a space and a NUL: no field's rule accepts it.
const HOSTILE = `../${"x".repeat(300)} \u0000`;

/** A message of `schema` with every string, list and map filled with HOSTILE (nested messages too, 3 deep). */
function hostile(schema: DescMessage, depth = 0): Message {
  const init: Record<string, unknown> = {};
  for (const f of schema.fields) {
    if (f.oneof) continue;
    if (f.fieldKind === "scalar" && f.scalar === 9 /* string */) init[f.localName] = HOSTILE;
    else if (f.fieldKind === "list" && f.listKind === "scalar" && f.scalar === 9) init[f.localName] = [HOSTILE];
    else if (f.fieldKind === "map" && f.mapKind === "scalar" && f.scalar === 9) init[f.localName] = { [HOSTILE]: HOSTILE };
    else if (depth < 3 && f.fieldKind === "message" && !f.message.typeName.startsWith("google."))
      init[f.localName] = hostile(f.message, depth + 1);
    else if (depth < 3 && f.fieldKind === "list" && f.listKind === "message" && !f.message.typeName.startsWith("google."))
      init[f.localName] = [hostile(f.message, depth + 1)];
  }
  return create(schema, init as never);
}

function refusal(fn: () => unknown): { code: string; field: string } | undefined {
  try {
    fn();
    return undefined;
  } catch (e) {
    if (!isSkipperError(e)) throw e;
    return { code: e.code, field: String((e.details as { field?: unknown } | undefined)?.field ?? "") };
  }
}

const request = (type: OrderType, action: Message | undefined, actionCase: string | undefined, tenantId = "t1") =>
  create(CreateWorkOrderRequestSchema, {
    type,
    target: {
      nodeId: "n1",
      tenantId:
        CONTROLLER_ORDER_KINDS[type].queued === "on request" && (CONTROLLER_ORDER_KINDS[type] as { tenant: string }).tenant === "none"
          ? ""
          : tenantId,
    },
    action: actionCase ? { kind: { case: actionCase, value: action } as never } : undefined,
  });

describe("order kinds", () => {
  it("every WorkOrderType of the contract has a kind, on both tables", () => {
    const contract = Object.values(WorkOrderType).filter((v): v is OrderType => typeof v === "number" && v !== WorkOrderType.UNSPECIFIED);
    expect([...ORDER_TYPES].sort((a, b) => a - b)).toEqual(contract.sort((a, b) => a - b));
    expect(
      Object.keys(CONTROLLER_ORDER_KINDS)
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual(contract);
  });

  const adHoc = ORDER_TYPES.filter((t) => CONTROLLER_ORDER_KINDS[t].queued === "on request");
  const byReconciler = ORDER_TYPES.filter((t) => CONTROLLER_ORDER_KINDS[t].queued === "by the reconciler");

  it.each(adHoc.map((t) => [WorkOrderType[t], t] as const))("%s: an action of another member is refused, naming action", (_n, type) => {
    const own = ORDER_KINDS[type].action!;
    const other = adHoc.map((t) => ORDER_KINDS[t].action!).find((c) => c !== own)!;
    const r = refusal(() => checkRequest(request(type, create(actionField(other).message!), other), NOW));
    expect(r).toEqual({ code: "INVALID_REQUEST", field: "action" });
  });

  it.each(adHoc.map((t) => [WorkOrderType[t], t] as const))(
    "%s: an action whose fields are all hostile is refused, naming a field of the action",
    (_n, type) => {
      const kind = CONTROLLER_ORDER_KINDS[type];
      if (kind.queued !== "on request") throw new Error("not an ad-hoc kind");
      const member = actionField(ORDER_KINDS[type].action!);
      if (kind.check === "no fields") {
        // Nothing to check: the action message must then have no fields.
        expect(member.message!.fields.map((f) => f.name)).toEqual([]);
        return;
      }
      const r = refusal(() => checkRequest(request(type, hostile(member.message!), member.localName), NOW));
      expect(r?.code).toBe("INVALID_REQUEST");
      expect(r?.field).toMatch(/^action\./);
    },
  );

  it.each(byReconciler.map((t) => [WorkOrderType[t], t] as const))("%s: refused on request, saying what to do instead", (_n, type) => {
    const r = refusal(() => checkRequest(request(type, undefined, undefined), NOW));
    expect(r).toEqual({ code: "INVALID_REQUEST", field: "type" });
  });

  it("UNSPECIFIED and a number the contract does not have are refused", () => {
    for (const type of [WorkOrderType.UNSPECIFIED, 99]) {
      expect(refusal(() => checkRequest(create(CreateWorkOrderRequestSchema, { type, target: { nodeId: "n1" } }), NOW))).toEqual({
        code: "INVALID_REQUEST",
        field: "type",
      });
    }
  });
});
