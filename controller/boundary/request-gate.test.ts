import type { IncomingHttpHeaders } from "node:http";
import { describe, expect, it } from "vitest";
import { headerReaderOf, headersOf } from "./request-gate.js";

describe("headerReaderOf", () => {
  it("reads a request's headers as a fetch Headers copy of them would", () => {
    const raw: IncomingHttpHeaders = {
      ":path": "/v1/skipper.v1.NodeService/Heartbeat",
      ":authority": "controller:8443",
      authorization: "Bearer abc",
      "x-admin-token": "t1, t2",
      "x-forwarded-for": ["10.0.0.1", "10.0.0.2"],
      "content-type": "application/json",
    };
    const reader = headerReaderOf(raw);
    const copy = headersOf(raw);
    for (const name of ["authorization", "Authorization", "X-Admin-Token", "x-forwarded-for", "content-type", "absent"]) {
      expect(reader.get(name), name).toBe(copy.get(name));
    }
    expect(reader.get("authorization")).toBe("Bearer abc");
    expect(reader.get("x-forwarded-for")).toBe("10.0.0.1, 10.0.0.2");
    // Pseudo-headers are no headers at all (Headers.get throws on the name).
    expect(reader.get(":path")).toBeNull();
    expect(reader.get(":authority")).toBeNull();
    expect(reader.get("absent")).toBeNull();
  });
});
