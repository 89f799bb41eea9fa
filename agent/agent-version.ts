/** The version this source tree builds when no other is asked for (scripts/bundle-agent.mjs reads the line). */
export const DEFAULT_AGENT_VERSION = "0.1.0";

// scripts/bundle-agent.mjs defines it when SKIPPY_BUNDLE_VERSION asks for another version.
declare const __SKIPPY_AGENT_VERSION__: string | undefined;

/** The agent's version: sent with every heartbeat, named when it cannot run an order's type. */
export const AGENT_VERSION: string = typeof __SKIPPY_AGENT_VERSION__ !== "undefined" ? __SKIPPY_AGENT_VERSION__ : DEFAULT_AGENT_VERSION;
