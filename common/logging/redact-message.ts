// redact() for contract messages: the message through proto JSON, redacted, and back, for the
// places that hand a caller a record with its secrets hidden (snapshots, reads by a viewer).
import { fromJson, toJson, type DescMessage, type JsonValue, type MessageShape } from "@bufbuild/protobuf";
import { redact } from "./redact.js";

/** A copy of `msg` with secrets replaced by "[REDACTED]". */
export function redactMessage<D extends DescMessage>(schema: D, msg: MessageShape<D>): MessageShape<D> {
  const json = redact(toJson(schema, msg, { useProtoFieldName: true })) as JsonValue;
  return fromJson(schema, json, { ignoreUnknownFields: true });
}
