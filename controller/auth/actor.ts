// The Actor that events and audit entries record for a caller.
import { create } from "@bufbuild/protobuf";
import { ActorKind, ActorSchema, Role, type Actor } from "../../gen/skipper/v1/access_pb.js";
import type { Principal } from "../base/context.js";

/** The actor of a principal. */
export function actorOf(p: Principal): Actor {
  switch (p.kind) {
    case "admin":
      return create(ActorSchema, { kind: ActorKind.ADMIN_TOKEN, role: Role.ADMIN });
    case "api_key":
      return create(ActorSchema, { kind: ActorKind.API_KEY, id: p.keyId, name: p.name, role: p.role });
    case "node":
      return create(ActorSchema, {
        kind: ActorKind.NODE,
        id: p.nodeId,
        role: Role.NODE,
        name: p.relayNodeId ? `relay ${p.relayNodeId}` : "",
      });
    default:
      return create(ActorSchema, { kind: ActorKind.ANONYMOUS });
  }
}

/** The controller itself, for what its own loops decide. */
export const CONTROLLER_ACTOR: Actor = create(ActorSchema, { kind: ActorKind.CONTROLLER });

/** A short label for places that keep a string ("admin", "api_key:ci-web", "node:host-1"). */
export function actorLabel(a: Actor | undefined): string {
  switch (a?.kind) {
    case ActorKind.ADMIN_TOKEN:
      return "admin";
    case ActorKind.API_KEY:
      return `api_key:${a.name}`;
    case ActorKind.NODE:
      return `node:${a.id}`;
    case ActorKind.ENROLLMENT:
      return `enrollment:${a.id}`;
    case ActorKind.ANONYMOUS:
      return "anonymous";
    default:
      return "controller";
  }
}
