// Who may call what. Each RPC declares the permission it needs in the contract
// (`option (skipper.v1.permission)`, see proto/skipper/v1/access.proto); this module reads that
// declaration and says which roles hold it. It is the one place the rule for any RPC or REST
// route is decided; handlers add only what depends on the request (a node's own id, a tenant).
import { getOption, type DescMethod } from "@bufbuild/protobuf";
import { Permission, permission as permissionOption, Role } from "../../gen/skipper/v1/access_pb.js";

const READERS: readonly Permission[] = [Permission.PUBLIC, Permission.READ, Permission.READ_OR_NODE];

/** The permissions each role holds. Nobody holds ENROLL: enrollment calls carry their own token. */
const ROLE_PERMISSIONS: ReadonlyMap<Role, ReadonlySet<Permission>> = new Map([
  [Role.ADMIN, new Set([...READERS, Permission.WRITE_DESIRED, Permission.OPERATE, Permission.ADMIN])],
  [Role.OPERATOR, new Set([...READERS, Permission.WRITE_DESIRED, Permission.OPERATE])],
  [Role.GENERATOR, new Set([...READERS, Permission.WRITE_DESIRED])],
  [Role.VIEWER, new Set(READERS)],
  [Role.NODE, new Set([Permission.PUBLIC, Permission.NODE, Permission.READ_OR_NODE])],
]);

/**
 * The permission `method` declares. A method that declares none is refused to everyone (fail
 * closed); a test checks that every RPC of the contract declares one.
 */
export function permissionOf(method: DescMethod): Permission {
  // getOption decodes the option from the descriptor on every call; the contract is fixed.
  let p = declared.get(method);
  if (p === undefined) declared.set(method, (p = getOption(method, permissionOption)));
  return p;
}

const declared = new WeakMap<DescMethod, Permission>();

/** Whether `role` holds `permission`. */
export function roleHolds(role: Role, permission: Permission): boolean {
  return ROLE_PERMISSIONS.get(role)?.has(permission) ?? false;
}

/** The lowercase name of a permission ("operate"), as errors and docs spell it. */
export function permissionName(p: Permission): string {
  return (Permission[p] ?? "unspecified").toLowerCase();
}

/** The lowercase name of a role ("viewer"). */
export function roleName(r: Role): string {
  return (Role[r] ?? "unspecified").toLowerCase();
}

/** The role for a lowercase name, or undefined. */
export function roleOfName(name: string): Role | undefined {
  const r = Role[name.toUpperCase() as keyof typeof Role];
  return r === undefined || r === Role.UNSPECIFIED ? undefined : r;
}

/** Roles that hold `permission`, weakest first (for messages that say what would do). */
export function rolesHolding(permission: Permission): Role[] {
  return [Role.VIEWER, Role.GENERATOR, Role.OPERATOR, Role.ADMIN, Role.NODE].filter((r) => roleHolds(r, permission));
}
