// Admission: who is calling (the authenticator) and whether that caller may call this RPC at all
// (the permission the contract declares, auth/permissions.ts). The RPC interceptor admits every
// call; the HTTP front door admits a request before its body is read (controller/boundary/request-gate.ts,
// the REST handler), so an unauthenticated client cannot make the controller buffer anything.
import type { DescMethod } from "@bufbuild/protobuf";
import { Permission, Role } from "../../gen/skipper/v1/access_pb.js";
import type { PeerCertificate, Principal } from "../base/context.js";
import { forbidden, isSkipperError, unauthorized, type SkipperError } from "../base/errors.js";
import type { Authenticator, HeaderReader } from "./authenticator.js";
import { permissionName, permissionOf, roleHolds, roleName, rolesHolding } from "./permissions.js";

/** Told of a call refused to an authenticated caller (the audit trail records it). */
export type OnRefused = (principal: Principal, error: SkipperError) => Promise<void>;

/**
 * The caller, when these headers may call `method`; throws UNAUTHORIZED or FORBIDDEN otherwise,
 * after telling `onRefused` of a FORBIDDEN.
 */
export async function admit(
  authenticator: Authenticator,
  method: DescMethod,
  headers: HeaderReader,
  opts: { onRefused?: OnRefused; peer?: PeerCertificate } = {},
): Promise<Principal> {
  const { onRefused } = opts;
  // A certificate TLS did not accept does not lock its holder out of the open calls (health,
  // whoami, enrolling again): there it counts as no credential.
  const peer = opts.peer?.error !== undefined && isOpen(method) ? undefined : opts.peer;
  const principal = await authenticator.authenticate(headers, peer);
  try {
    authorize(permissionOf(method), principal);
  } catch (e) {
    if (onRefused && isSkipperError(e)) await onRefused(principal, e);
    throw e;
  }
  return principal;
}

/** Whether `method` is open to callers without a credential (they get small body limits). */
export function isOpen(method: DescMethod): boolean {
  return isOpenPermission(permissionOf(method));
}

function isOpenPermission(p: Permission): boolean {
  return p === Permission.PUBLIC || p === Permission.ENROLL;
}

/** Whether `p`'s role holds `permission` (an anonymous caller holds none). */
export function holds(p: Principal, permission: Permission): boolean {
  const role = roleOf(p);
  return role !== undefined && roleHolds(role, permission);
}

/** The role a principal acts with (anonymous: none). */
export function roleOf(p: Principal): Role | undefined {
  switch (p.kind) {
    case "admin":
      return Role.ADMIN;
    case "api_key":
      return p.role;
    case "node":
      return Role.NODE;
    default:
      return undefined;
  }
}

/** Throws unless `p` holds `permission` (a node's own-id and tenant checks are the handler's). */
export function authorize(permission: Permission, p: Principal): void {
  if (isOpenPermission(permission)) return;
  const role = roleOf(p);
  if (role === undefined) {
    // Say what would do: the commonest case is a new shell without a credential.
    throw unauthorized(
      permission === Permission.NODE
        ? "missing or invalid credentials: send the node's token as Authorization: Bearer <token>, or its client certificate"
        : "missing or invalid credentials: send an API key or the admin token (printed once at the controller's first start; `--reset-admin-token` mints a new one) as Authorization: Bearer <key>",
    );
  }
  if (permission === Permission.UNSPECIFIED) {
    throw forbidden("this call declares no permission in the contract, so nobody may call it", { permission: "unspecified" });
  }
  if (!roleHolds(role, permission)) {
    const needed = permissionName(permission);
    const holders = rolesHolding(permission).map(roleName).join(", ");
    throw forbidden(`this call needs the ${needed} permission (held by: ${holders}); the caller's role is ${roleName(role)}`, {
      permission: needed,
      role: roleName(role),
    });
  }
}
