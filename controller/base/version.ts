// The controller's version, reported by the health check and in logs.
export const VERSION = "0.1.0";
