// What the container executor knows of a container name on the engine, read from the engine alone:
// `<name>` is the one that runs (or should), `<name>-previous` the one it replaced, kept stopped
// for a rollback, and `<name>-replaced` one a rollback is swapping out. Every one the executor
// creates carries the label skipper.container=<name>; a container under one of these names
// without it is not the executor's and is never touched. (Docker cannot change a container's
// labels after it is created, so a container's role is its name, not a label.)
import { create } from "@bufbuild/protobuf";
import { ContainerDeploymentSchema, type ContainerDeployment } from "../../gen/skipper/v1/order_action_pb.js";
import { PREVIOUS_SUFFIX, REPLACED_SUFFIX } from "../../common/container-rules.js";
import { inspectContainer, type ContainerFacts } from "../engine/container-engine.js";

export const LABEL = {
  container: "skipper.container",
  spec: "skipper.spec",
  image: "skipper.image",
  digest: "skipper.digest",
  order: "skipper.order",
} as const;

/** The names of one managed container's slots. */
export interface Slots {
  name: string;
  previous: string;
  replaced: string;
}

export function slotsOf(name: string): Slots {
  return { name, previous: `${name}${PREVIOUS_SUFFIX}`, replaced: `${name}${REPLACED_SUFFIX}` };
}

/** The containers in a name's slots, as the engine has them now. */
export interface Seen {
  current?: ContainerFacts;
  previous?: ContainerFacts;
  replaced?: ContainerFacts;
}

/** Reads the slots; a container there that is not the executor's is named in `foreign`. */
export async function look(slots: Slots): Promise<{ seen: Seen; foreign?: string }> {
  const [current, previous, replaced] = await Promise.all([named(slots.name), named(slots.previous), named(slots.replaced)]);
  for (const c of [current, previous, replaced]) if (c && c.labels[LABEL.container] !== slots.name) return { seen: {}, foreign: c.name };
  return { seen: { current, previous, replaced } };
}

/**
 * The container under exactly `name`. The engine resolves a name it does not know as an id prefix
 * (`docker container inspect cafe` finds a container whose id starts with cafe), and that container
 * is not in the slot.
 */
async function named(name: string): Promise<ContainerFacts | undefined> {
  const c = await inspectContainer(name);
  return c?.name === name ? c : undefined;
}

/** The result's view of a container after an order. */
export function deploymentOf(
  name: string,
  current: ContainerFacts | undefined,
  previous: ContainerFacts | undefined,
  run: { steps: string[]; pulled?: boolean; resumed?: boolean; previousKept?: boolean },
): ContainerDeployment {
  return create(ContainerDeploymentSchema, {
    name,
    containerId: current?.id ?? "",
    image: current?.labels[LABEL.image] ?? "",
    digest: current?.labels[LABEL.digest] ?? "",
    previousContainerId: previous?.id ?? "",
    previousDigest: previous?.labels[LABEL.digest] ?? "",
    previousKept: run.previousKept ?? false,
    pulled: run.pulled ?? false,
    resumed: run.resumed ?? false,
    steps: run.steps,
  });
}
