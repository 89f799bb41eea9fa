// Admission: who is calling (the authenticator) and whether that caller may call this RPC at all
// (the policy table). The RPC interceptor admits every call; the HTTP front door admits a request
// before its body is read (controller/request-gate.ts, the REST handler), so an unauthenticated
// client cannot make the controller buffer anything.
import type { DescMethod } from "@bufbuild/protobuf";
import type { Principal } from "../context.js";
import { forbidden, unauthorized } from "../errors.js";
import type { Authenticator } from "./authenticator.js";
import { accessFor, type Access } from "./policy.js";

/** The caller, when these headers may call `method`; throws UNAUTHORIZED or FORBIDDEN otherwise. */
export async function admit(authenticator: Authenticator, method: DescMethod, headers: Headers): Promise<Principal> {
  const access = accessFor(method);
  const principal = await authenticator.authenticate(headers);
  authorize(access, principal);
  return principal;
}

/** Throws unless `p` holds the access a call needs (a node's own-id checks are the handler's). */
export function authorize(access: Access, p: Principal): void {
  if (access === "public") return;
  if (p.kind === "anonymous") {
    // Say what would do: the commonest case is a new shell without the admin token.
    throw unauthorized(
      access === "node"
        ? "missing or invalid credentials: send the node's token as Authorization: Bearer <token>"
        : "missing or invalid credentials: send the admin token (printed once at the controller's first start; `--reset-admin-token` mints a new one) as x-admin-token or Authorization: Bearer",
    );
  }
  if (access === "admin" && p.kind !== "admin") throw forbidden("this call needs the admin token");
  if (access === "node" && p.kind !== "node") throw forbidden("this call needs a node token");
}
