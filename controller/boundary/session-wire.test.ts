import { describe, expect, it } from "vitest";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { endStreamFromJson } from "@connectrpc/connect/protocol-connect";
import { findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { SessionRequestSchema, SessionResponseSchema } from "../../gen/skipper/v1/node_service_pb.js";
import { connectErrorOf } from "./api-errors.js";
import { SkipperError } from "../base/errors.js";
import { decodeRequest, encodeResponse, endOfStream, sessionWireOf } from "./session-wire.js";

const post = (headers: Record<string, string>, version = "2.0") => sessionWireOf("POST", version, headers);

describe("which Session requests the controller frames itself", () => {
  it("takes Connect streaming and gRPC, JSON or binary, uncompressed, over HTTP/2", () => {
    expect(post({ "content-type": "application/connect+json" })).toMatchObject({ protocol: "connect", json: true });
    expect(post({ "content-type": "application/connect+proto" })).toMatchObject({ protocol: "connect", json: false });
    expect(post({ "content-type": "application/grpc" })).toMatchObject({
      protocol: "grpc",
      json: false,
      contentType: "application/grpc+proto",
    });
    expect(post({ "content-type": "application/grpc+json" })).toMatchObject({ protocol: "grpc", json: true });
    expect(post({ "content-type": "application/connect+json", "connect-content-encoding": "identity" })).toBeDefined();
  });

  it("leaves to the router gRPC-Web, compressed streams, deadlines, HTTP/1.1 and anything but POST", () => {
    expect(post({ "content-type": "application/grpc-web+proto" })).toBeUndefined();
    expect(post({ "content-type": "application/connect+json", "connect-content-encoding": "gzip" })).toBeUndefined();
    expect(post({ "content-type": "application/grpc", "grpc-encoding": "gzip" })).toBeUndefined();
    expect(post({ "content-type": "application/grpc", "grpc-timeout": "10S" })).toBeUndefined();
    expect(post({ "content-type": "application/connect+proto", "connect-timeout-ms": "1000" })).toBeUndefined();
    expect(post({ "content-type": "application/connect+json" }, "1.1")).toBeUndefined();
    expect(post({ "content-type": "application/json" })).toBeUndefined();
    expect(sessionWireOf("GET", "2.0", { "content-type": "application/connect+json" })).toBeUndefined();
  });
});

describe("the Session wire", () => {
  const json = post({ "content-type": "application/connect+json" })!;
  const grpc = post({ "content-type": "application/grpc" })!;
  const hello = create(SessionRequestSchema, { kind: { case: "hello", value: { nodeId: "n1", agentVersion: "1" } } });

  it("decodes a message in either format and refuses one that is not a SessionRequest as INVALID_REQUEST", () => {
    const text = new TextEncoder().encode(toJsonString(SessionRequestSchema, hello, { useProtoFieldName: true }));
    expect(decodeRequest(json, { flags: 0, data: text }, {}).kind.case).toBe("hello");
    expect(decodeRequest(grpc, { flags: 0, data: toBinary(SessionRequestSchema, hello) }, {}).kind.case).toBe("hello");
    const bad = () => decodeRequest(json, { flags: 0, data: new TextEncoder().encode('{"hello": 5}') }, {});
    expect(bad).toThrow(SkipperError);
    expect(bad).toThrow(/not a valid skipper.v1.SessionRequest/);
    expect(() => decodeRequest(json, { flags: 0, data: new Uint8Array([0xff, 0xfe]) }, {})).toThrow(/not a valid/);
    expect(() => decodeRequest(grpc, { flags: 1, data: new Uint8Array() }, {})).toThrow(/compressed/);
  });

  it("frames a response as one envelope", () => {
    const m = create(SessionResponseSchema, { kind: { case: "welcome", value: { sessionId: "s1" } } });
    const bytes = encodeResponse(json, m, {});
    expect(bytes[0]).toBe(0);
    expect(new DataView(bytes.buffer).getUint32(1)).toBe(bytes.length - 5);
    expect(JSON.parse(new TextDecoder().decode(bytes.subarray(5)))).toEqual({ welcome: { sessionId: "s1" } });
  });

  it("ends with the error as Connect's end-of-stream message or gRPC's trailers, the ApiError detail kept", () => {
    const err = connectErrorOf(new SkipperError("FORBIDDEN", "not yours"));
    const { last } = endOfStream(json, err, {});
    expect(last![0]).toBe(0b10);
    const end = endStreamFromJson(last!.subarray(5));
    expect(end.error?.rawMessage).toBe("not yours");
    expect(end.error?.code).toBe(err.code);
    expect(end.error?.details.length).toBe(1);
    const { trailers } = endOfStream(grpc, err, {});
    const parsed = findTrailerError(new Headers(trailers));
    expect(parsed?.code).toBe(err.code);
    expect(parsed?.rawMessage).toBe("not yours");
    expect(endOfStream(grpc, undefined, {}).trailers).toEqual({ "grpc-status": "0" });
    expect(endStreamFromJson(endOfStream(json, undefined, {}).last!.subarray(5)).error).toBeUndefined();
  });
});
