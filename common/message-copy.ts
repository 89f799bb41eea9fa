// A deep copy of a protobuf-es message, as clone() from @bufbuild/protobuf makes it, without going
// through reflection. Messages of proto3 files are plain objects (fields as own properties; lists
// as arrays; maps, oneofs and google.protobuf.Struct/Value as plain objects; bytes as Uint8Array;
// 64-bit integers as bigint), so a structural copy of that shape is the same message. The store
// copies every record it hands out and every record it keeps, several times per order: clone()
// builds a reflection wrapper per nested message and costs several times as much.
//
// A value that is not of that shape (an object with a prototype of its own, as proto2 and
// editions messages with field defaults have) makes the whole copy fall back to clone().
import { clone, type DescMessage, type MessageShape } from "@bufbuild/protobuf";

/** A deep copy of `msg`: equal to it (equals()), sharing no object or array with it. */
export function copyMessage<D extends DescMessage>(schema: D, msg: MessageShape<D>): MessageShape<D> {
  try {
    return copyValue(msg) as MessageShape<D>;
  } catch (e) {
    if (e !== NOT_PLAIN) throw e;
    return clone(schema, msg);
  }
}

const NOT_PLAIN = new Error("not a plain message object");

function copyValue(v: unknown): unknown {
  if (typeof v !== "object" || v === null) return v;
  if (Array.isArray(v)) {
    const out = new Array<unknown>(v.length);
    for (let i = 0; i < v.length; i++) out[i] = copyValue(v[i]);
    return out;
  }
  if (v instanceof Uint8Array) return v.slice();
  if (Object.getPrototypeOf(v) !== Object.prototype) throw NOT_PLAIN;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(v)) {
    const value = copyValue((v as Record<string, unknown>)[key]);
    // A map or Struct key is data: "__proto__" must stay a key, not set the copy's prototype.
    if (key === "__proto__") Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
    else out[key] = value;
  }
  return out;
}

/**
 * Freezes `msg` and every object and array in it, in place, and returns it: a change to it then
 * throws (modules run in strict mode) instead of quietly changing a record another holder shares.
 * Bytes fields (Uint8Array) cannot be frozen and stay writable.
 */
export function freezeMessage<T extends object>(msg: T): T {
  freezeValue(msg);
  return msg;
}

function freezeValue(v: unknown): void {
  if (typeof v !== "object" || v === null || v instanceof Uint8Array || Object.isFrozen(v)) return;
  if (Array.isArray(v)) for (const item of v) freezeValue(item);
  else for (const key of Object.keys(v)) freezeValue((v as Record<string, unknown>)[key]);
  Object.freeze(v);
}
