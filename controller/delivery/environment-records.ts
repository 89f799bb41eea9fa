// The one owner of environments' status (EnvironmentStatus in current_state): the promotion loop's
// plans and operators' commands are written here, each with its events in the same store write.
// Every write is a read-modify-write inside the store's update (serialised per record on the file
// store, a row lock on PostgreSQL), so two controllers never lose each other's writes: a command
// applies to the status as stored at that instant, and a plan is written only if the status it
// was made from is still the stored one (EnvironmentChanged otherwise: plan again).
import { writeStatus } from "../resources/status-write.js";
import { create, equals } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { EnvironmentStatusSchema, type EnvironmentSpec, type EnvironmentStatus } from "../../gen/skipper/v1/delivery_pb.js";
import type { RolloutActor } from "../../gen/skipper/v1/rollout_pb.js";
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Trace } from "../base/context.js";
import { notFound } from "../base/errors.js";
import { buildEvent, type DeliveryEventType } from "../events/event-recorder.js";
import type { Store } from "../store/store.js";
import { applyCommand, type EnvironmentCommand } from "./environment-commands.js";

/** An event a status write tells. */
export interface EnvironmentEvent {
  type: DeliveryEventType;
  data: Record<string, string>;
}

/** The stored status moved on since a plan read it: plan again. */
export class EnvironmentChanged extends Error {
  override readonly name = "EnvironmentChanged";
}

/** The spec of a stored, live environment. */
export function environmentOf(r: Resource | undefined): EnvironmentSpec | undefined {
  return r?.desiredState?.kind.case === "environment" && !r.deletion ? r.desiredState.kind.value : undefined;
}

/** The status of a stored environment (empty when none was written yet). */
export function environmentStatusOf(r: Resource | undefined): EnvironmentStatus {
  return r?.currentState?.kind.case === "environment" ? r.currentState.kind.value : create(EnvironmentStatusSchema);
}

/** Reads and writes environments' status; holds no state. */
export class EnvironmentRecords {
  constructor(
    private readonly store: Store,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Applies an operator's command; answers the environment as stored after it. */
  async command(id: string, cmd: EnvironmentCommand, by: RolloutActor, trace: Trace): Promise<Resource> {
    return this.write(id, trace, (status) => {
      const outcome = applyCommand(status, cmd, by);
      return outcome ? { status: outcome.status, events: [outcome.event] } : undefined;
    });
  }

  /** Writes a plan's status when `expected` is still the stored status (EnvironmentChanged otherwise). */
  async save(
    id: string,
    expected: EnvironmentStatus,
    next: EnvironmentStatus,
    events: readonly EnvironmentEvent[],
    trace: Trace,
  ): Promise<Resource> {
    return this.write(id, trace, (status) => {
      if (!equals(EnvironmentStatusSchema, status, expected))
        throw new EnvironmentChanged(`environment ${id} changed while it was planned`);
      return equals(EnvironmentStatusSchema, status, next) && events.length === 0 ? undefined : { status: next, events };
    });
  }

  // One read-modify-write of the status; `change` returns undefined to write nothing.
  private async write(
    id: string,
    trace: Trace,
    change: (status: EnvironmentStatus) => { status: EnvironmentStatus; events: readonly EnvironmentEvent[] } | undefined,
  ): Promise<Resource> {
    let events: readonly EnvironmentEvent[] = [];
    return this.store.updateResource(
      "environment",
      id,
      (cur) => {
        if (cur.deletion || !environmentOf(cur)) throw notFound("environment", id);
        const next = change(environmentStatusOf(cur));
        events = next?.events ?? [];
        if (!next) return cur;
        return writeStatus(cur, { case: "environment", value: next.status }, trace, timestampFromDate(this.now()));
      },
      undefined,
      (written) =>
        events.map((e) =>
          buildEvent({
            type: e.type,
            ...trace,
            resourceType: "environment",
            resourceId: id,
            revision: written.metadata?.resourceVersion,
            data: e.data,
          }),
        ),
    );
  }
}
