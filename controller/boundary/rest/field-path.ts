// Dotted field paths ("target.node_id") over message descriptors, and reading/writing the field
// they name through protobuf-es reflection, which creates intermediate messages and respects
// oneofs so the binder never touches generated objects by hand.
import { create, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";

/** Finds a field by proto name, or also by JSON (lowerCamel) name when `allowJsonName`. */
export function findField(desc: DescMessage, name: string, allowJsonName: boolean): DescField | undefined {
  return desc.fields.find((f) => f.name === name || (allowJsonName && f.jsonName === name));
}

/** Resolves "a.b.c" to its fields; undefined when a part is unknown or crosses a non-message. */
export function resolveFieldPath(desc: DescMessage, path: string, allowJsonName: boolean): DescField[] | undefined {
  const fields: DescField[] = [];
  let current: DescMessage | undefined = desc;
  for (const part of path.split(".")) {
    if (current === undefined) return undefined;
    const field = findField(current, part, allowJsonName);
    if (field === undefined) return undefined;
    fields.push(field);
    current = field.fieldKind === "message" ? field.message : undefined;
  }
  return fields;
}

/** The proto-name spelling of a resolved path, e.g. "target.node_id". */
export function pathName(fields: DescField[]): string {
  return fields.map((f) => f.name).join(".");
}

/** The reflected message holding the last field of `path`, creating and attaching parents. */
export function parentOf(root: ReflectMessage, path: DescField[]): ReflectMessage {
  let current = root;
  for (const field of path.slice(0, -1)) {
    if (field.fieldKind !== "message") throw new Error(`${field.toString()} is not a message field`);
    if (!current.isSet(field)) current.set(field, reflect(field.message, create(field.message)));
    current = current.get(field);
  }
  return current;
}

/** The value at `path` when every message along it is set, else undefined. */
export function valueAt(root: ReflectMessage, path: DescField[]): unknown {
  let current = root;
  for (const field of path.slice(0, -1)) {
    if (field.fieldKind !== "message" || !current.isSet(field)) return undefined;
    current = current.get(field);
  }
  const last = path[path.length - 1]!;
  return current.isSet(last) ? current.get(last) : undefined;
}
