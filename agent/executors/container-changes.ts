// Which compose services an apply changed, from the engine's view before and after: a service is
// unchanged when it has the same containers (ids) with the same compose config hashes, running
// before and after; anything else (new, recreated, started, scaled, removed) is a change. Pure, so it is tested without an engine.
import type { ContainerObservation } from "../../gen/skipper/v1/resource_pb.js";

export interface ContainerChanges {
  changed: string[];
  unchanged: string[];
}

export function containerChanges(
  before: Map<string, ContainerObservation[]>,
  after: Map<string, ContainerObservation[]>,
): ContainerChanges {
  const services = [...new Set([...before.keys(), ...after.keys()])].sort();
  const changed: string[] = [];
  const unchanged: string[] = [];
  for (const s of services) {
    const a = fingerprint(before.get(s) ?? []);
    const b = fingerprint(after.get(s) ?? []);
    (a === b && a !== "" ? unchanged : changed).push(s);
  }
  return { changed, unchanged };
}

/**
 * Compose service names as the service resources they are (`composeServices`: resource id ->
 * compose service, from the order), sorted; a name no resource describes stays as it is.
 */
export function asResourceIds(names: string[], composeServices: Record<string, string>): string[] {
  const byName = new Map<string, string[]>();
  for (const [id, name] of Object.entries(composeServices)) byName.set(name, [...(byName.get(name) ?? []), id]);
  return [...new Set(names.flatMap((n) => byName.get(n) ?? [n]))].sort();
}

function fingerprint(containers: ContainerObservation[]): string {
  return containers
    .map((c) => `${c.containerId}:${c.configHash}:${c.state === "running" ? "up" : "down"}`)
    .sort()
    .join(",");
}
