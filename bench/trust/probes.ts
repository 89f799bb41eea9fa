// Every probe of the trust suite, in the order the table lists them.
import type { Probe } from "./figures.js";

export const PROBES: Probe[] = [];
