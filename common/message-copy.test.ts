import { readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { clone, create, equals, ScalarType, type DescField, type DescFile, type DescMessage, type Message } from "@bufbuild/protobuf";
import { nestedTypes, reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { StructSchema, TimestampSchema } from "@bufbuild/protobuf/wkt";
import { copyMessage, freezeMessage } from "./message-copy.js";
import { EventSchema } from "../gen/skipper/v1/event_pb.js";

// Every message of the contract, from the generated files.
const genDir = fileURLToPath(new URL("../gen/skipper/v1/", import.meta.url));
const files: DescFile[] = [];
for (const name of readdirSync(genDir).filter((n) => n.endsWith("_pb.ts") || n.endsWith("_pb.js"))) {
  const mod = (await import(join(genDir, name))) as Record<string, unknown>;
  for (const v of Object.values(mod)) if ((v as DescFile | undefined)?.kind === "file") files.push(v as DescFile);
}
const schemas: DescMessage[] = files.flatMap((f) => [...nestedTypes(f)].filter((t): t is DescMessage => t.kind === "message"));

// A deterministic pseudo-random source, so a failure repeats.
let seed = 42;
const rand = (): number => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

function scalar(t: ScalarType): unknown {
  switch (t) {
    case ScalarType.STRING:
      return pick(["", "a", "__proto__", "ü-ñ", "line\nbreak"]);
    case ScalarType.BOOL:
      return rand() < 0.5;
    case ScalarType.BYTES:
      return new Uint8Array([1, 2, Math.floor(rand() * 255)]);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return rand() * 100;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return BigInt(Math.floor(rand() * 1e6)) - 500000n;
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return BigInt(Math.floor(rand() * 1e6));
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return Math.floor(rand() * 1000);
    default:
      return Math.floor(rand() * 1000) - 500;
  }
}

function fill(desc: DescMessage, depth: number): ReflectMessage {
  const r = reflect(desc);
  if (desc.typeName === StructSchema.typeName) {
    // JSON content (Struct fields are plain objects in messages): a few keys, one nested.
    return reflect(StructSchema, create(StructSchema, {}));
  }
  for (const member of desc.members) {
    const field: DescField = member.kind === "oneof" ? pick(member.fields) : member;
    if (rand() < 0.25) continue;
    switch (field.fieldKind) {
      case "scalar":
        r.set(field, scalar(field.scalar));
        break;
      case "enum":
        r.set(field, pick(field.enum.values).number);
        break;
      case "message":
        if (depth < 4) r.set(field, fill(field.message, depth + 1));
        break;
      case "list": {
        const list = r.get(field);
        for (let i = Math.floor(rand() * 3); i > 0; i--) {
          if (field.listKind === "message") {
            if (depth < 4) list.add(fill(field.message, depth + 1));
          } else if (field.listKind === "enum") list.add(pick(field.enum.values).number);
          else list.add(scalar(field.scalar));
        }
        break;
      }
      case "map": {
        const map = r.get(field);
        for (let i = Math.floor(rand() * 3); i > 0; i--) {
          const key = field.mapKey === ScalarType.STRING ? pick(["k", "__proto__", "x.y"]) : scalar(field.mapKey);
          if (field.mapKind === "message") {
            if (depth < 4) map.set(key, fill(field.message, depth + 1));
          } else if (field.mapKind === "enum") map.set(key, pick(field.enum.values).number);
          else map.set(key, scalar(field.scalar));
        }
        break;
      }
    }
  }
  return r;
}

// True when `a` and `b` share an object or array anywhere below them.
function shares(a: unknown, b: unknown, seen = new Set<unknown>()): boolean {
  if (typeof a !== "object" || a === null || typeof b !== "object" || b === null) return false;
  if (a === b) return true;
  if (seen.has(a)) return false;
  seen.add(a);
  for (const key of Object.keys(a)) if (shares((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key], seen)) return true;
  return false;
}

describe("copyMessage", () => {
  it("covers the contract's messages", () => {
    expect(schemas.length).toBeGreaterThan(100);
  });

  it("copies every contract message as clone() does: equal, and sharing nothing with the original", () => {
    for (const schema of schemas) {
      for (let round = 0; round < 8; round++) {
        const msg = fill(schema, 0).message as Message;
        const copy = copyMessage(schema, msg);
        expect(equals(schema, copy, msg), schema.typeName).toBe(true);
        expect(equals(schema, copy, clone(schema, msg)), schema.typeName).toBe(true);
        expect(shares(copy, msg), schema.typeName).toBe(false);
      }
    }
  });

  it("copies JSON content (Struct) and map keys named __proto__ as data", () => {
    const e = create(EventSchema, {
      id: "e1",
      data: { a: [1, { b: null }], ["__proto__"]: { c: "x" } },
      timestamp: create(TimestampSchema, { seconds: 5n }),
    });
    const copy = copyMessage(EventSchema, e);
    expect(equals(EventSchema, copy, e)).toBe(true);
    expect(Object.getPrototypeOf(copy.data)).toBe(Object.prototype);
    expect(Object.keys(copy.data!)).toContain("__proto__");
    expect(shares(copy, e)).toBe(false);
    copy.data!.a = "changed";
    expect(e.data!.a).toEqual([1, { b: null }]);
  });

  it("falls back to clone() for a value that is not a plain object", () => {
    const e = create(EventSchema, { id: "e2" });
    const odd = Object.assign(Object.create({ inherited: true }) as object, e) as typeof e;
    const copy = copyMessage(EventSchema, odd);
    expect(equals(EventSchema, copy, e)).toBe(true);
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
  });
});

describe("freezeMessage", () => {
  it("freezes every object and list of every contract message, and a copy of it is writable and equal", () => {
    for (const schema of schemas) {
      const msg = fill(schema, 0).message as Message;
      const before = clone(schema, msg);
      expect(freezeMessage(msg)).toBe(msg);
      expect(equals(schema, msg, before), schema.typeName).toBe(true);
      const open: string[] = [];
      const walk = (v: unknown, path: string): void => {
        if (typeof v !== "object" || v === null || v instanceof Uint8Array) return;
        if (!Object.isFrozen(v)) open.push(path);
        for (const [k, x] of Object.entries(v)) walk(x, `${path}.${k}`);
      };
      walk(msg, schema.typeName);
      expect(open).toEqual([]);
      const copy = copyMessage(schema, msg);
      expect(Object.isFrozen(copy)).toBe(false);
      expect(equals(schema, copy, msg), schema.typeName).toBe(true);
    }
  });

  it("makes a change to a frozen message throw and leaves the message as it was", () => {
    const e = freezeMessage(create(EventSchema, { id: "e3", data: { a: [1, { b: "x" }] } }));
    expect(() => {
      e.id = "changed";
    }).toThrow(TypeError);
    expect(() => {
      (e.data!.a as unknown[]).push(2);
    }).toThrow(TypeError);
    expect(e.id).toBe("e3");
    expect(e.data).toEqual({ a: [1, { b: "x" }] });
  });
});
