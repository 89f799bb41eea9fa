// What a work order's transition writes with it, in the same step (the Store's StepOf): its events
// and edits of other records, such as its deployment's phase. store.ts re-exports these.
import type { Resource } from "../../gen/skipper/v1/resource_pb.js";
import type { Event } from "../../gen/skipper/v1/event_pb.js";
import type { ResourceType } from "../../common/ids.js";

/**
 * A resource written in the same step as a work order's transition: what the order's new state
 * implies for another record (its deployment's phase at a claim and at an end), so a crash keeps
 * the order's step, its events and these together or none of them. `mutate` is as
 * updateResource's (on a private copy; returned unchanged, nothing is written); a resource that is
 * not stored is passed over. Each written edit takes the next store revision.
 */
export interface ResourceEdit {
  resourceType: ResourceType;
  id: string;
  mutate: (current: Resource) => Resource;
}

/** What a work order's transition writes with it, in the same step: its events and edits of other records. */
export interface StepWrites {
  events: Event[];
  resources: ResourceEdit[];
}

/**
 * A work order transition's companions (EventsOf, or StepWrites when other records change with
 * it): made from the order as written, called once the step is certain, not at all when the step
 * changes nothing.
 */
export type StepOf<T> = (written: T) => Event[] | StepWrites;

/** The events and edits a StepOf gave (an EventsOf gives events only). */
export function stepWrites(given: Event[] | StepWrites): StepWrites {
  return Array.isArray(given) ? { events: given, resources: [] } : given;
}
