// Every probe of the trust suite, in the order the table lists them.
import type { Probe } from "./figures.js";
import { crashPointsProbe } from "./crash-points.js";
import { credentialLifecycleProbe } from "./credential-lifecycle.js";
import { hostileInputsProbe } from "./hostile-inputs.js";
import { killRoundsProbe } from "./kill-rounds.js";
import { leaseHoldersProbe } from "./lease-holders.js";
import { slowClientsProbe } from "./slow-clients.js";
import { stalledMemoryProbe } from "./stalled-memory.js";

export const PROBES: Probe[] = [
  hostileInputsProbe,
  slowClientsProbe,
  stalledMemoryProbe,
  credentialLifecycleProbe,
  killRoundsProbe,
  crashPointsProbe,
  leaseHoldersProbe,
];
