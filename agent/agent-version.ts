/** The agent's version: sent with every heartbeat, named when it cannot run an order's type. */
export const AGENT_VERSION = "0.1.0";
