// What the stalled-memory probe sends: for one RPC, a request on each protocol that reaches it
// (its REST routes from the contract's google.api.http rules, Connect unary JSON, gRPC and
// gRPC-Web), each with a body that is as large as the method's class allows but never ends.
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { isOpen } from "../../controller/auth/admission.js";
import { deriveRoutes } from "../../controller/boundary/rest/route-table.js";

/** One way of calling a method with a stalled body. */
export interface StallTarget {
  /** "HealthService.Check". */
  method: string;
  protocol: "REST" | "Connect JSON" | "gRPC" | "gRPC-Web";
  /** What the request line is, e.g. "GET /v1/health" or "POST /skipper.v1.HealthService/Check". */
  route: string;
  headers: http2Headers;
  /** Everything sent on the stream (END_STREAM never follows). */
  body: Buffer;
  /** What the body is, for labels: "16,368 B of JSON" or "envelope announcing 16,379 B, 16,363 B of it sent". */
  sends: string;
}

type http2Headers = Record<string, string>;

/** Bytes short of the cap each body stops at: "just under the cap", "all but the last few bytes". */
export const SHORTFALL = 16;

/** The open methods (PUBLIC or ENROLL in the contract) of `services`, in contract order. */
export function openMethods(services: DescService[]): DescMethod[] {
  return services.flatMap((s) => s.methods.filter((m) => isOpen(m)));
}

/**
 * Every protocol's stalled request for `method`, with bodies sized for a cap of `maxBytes`.
 * `vars` fills REST path variables (by field path); `headers` are added to each request.
 */
export function stallTargets(method: DescMethod, maxBytes: number, headers: http2Headers = {}, vars: http2Headers = {}): StallTarget[] {
  const name = `${method.parent.name}.${method.name}`;
  const canonical = `/${method.parent.typeName}/${method.name}`;
  const plain = plainBody(maxBytes);
  const framed = envelopedBody(maxBytes);
  const targets: StallTarget[] = deriveRoutes([method.parent])
    .filter((r) => r.rpc === method)
    .map((r) => {
      const path = r.template.replace(/\{([^}=]+)(=[^}]*)?\}/g, (_, field: string) => encodeURIComponent(vars[field] ?? "stall"));
      return {
        method: name,
        protocol: "REST",
        route: `${r.httpMethod} ${path}`,
        headers: { ":method": r.httpMethod, ":path": path, "content-type": "application/json", ...headers },
        ...plain,
      };
    });
  // A streaming method has no unary Connect form: its Connect call is enveloped like gRPC's.
  const unary = method.methodKind === "unary";
  targets.push({
    method: name,
    protocol: "Connect JSON",
    route: `POST /v1${canonical}`,
    headers: {
      ":method": "POST",
      ":path": `/v1${canonical}`,
      "content-type": unary ? "application/json" : "application/connect+json",
      "connect-protocol-version": "1",
      ...headers,
    },
    ...(unary ? plain : framed),
  });
  const rpc = (contentType: string, extra: http2Headers) => ({
    method: name,
    route: `POST ${canonical}`,
    headers: { ":method": "POST", ":path": canonical, "content-type": contentType, ...extra, ...headers },
    ...framed,
  });
  targets.push({ protocol: "gRPC", ...rpc("application/grpc", { te: "trailers" }) });
  targets.push({ protocol: "gRPC-Web", ...rpc("application/grpc-web+proto", { "x-grpc-web": "1" }) });
  return targets;
}

/** A JSON body just under the cap (it never ends, so it is never parsed). */
function plainBody(maxBytes: number): Pick<StallTarget, "body" | "sends"> {
  const body = Buffer.alloc(maxBytes - SHORTFALL, 0x61);
  body.write('{"x":"');
  return { body, sends: `${bytes(body.length)} of JSON` };
}

/** One envelope whose prefix announces the largest message the cap admits, all but its last bytes sent. */
function envelopedBody(maxBytes: number): Pick<StallTarget, "body" | "sends"> {
  const announced = maxBytes - 5;
  const body = Buffer.alloc(maxBytes - SHORTFALL, 0x61);
  body.writeUInt8(0, 0);
  body.writeUInt32BE(announced, 1);
  return { body, sends: `a 5-byte prefix announcing ${bytes(announced)} and ${bytes(body.length - 5)} of it` };
}

/** "16,368 B". */
export function bytes(n: number): string {
  return `${n.toLocaleString("en-US")} B`;
}
