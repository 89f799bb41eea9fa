// The RPCs the CLI has no command for, on purpose, and why: the agent's protocol (skippy calls
// them with its node credential), the enrollment a host makes itself, and the health probe. The
// README's "API only" paragraph lists the same names; test/cli-coverage.test.ts fails when an RPC
// of the contract is neither here nor declared by a command (command-rpcs.ts), or is both.

const FOR_AGENTS = "for agents: skippy calls it with its node credential";

/** RPC (`skipper.v1.Service/Method`) -> why it has no command. */
export const API_ONLY: Readonly<Record<string, string>> = {
  "skipper.v1.HealthService/Check": "for probes and load balancers, without a credential: `curl https://HOST:8443/health`",
  "skipper.v1.NodeService/Heartbeat": FOR_AGENTS,
  "skipper.v1.NodeService/GetNextWorkOrder": FOR_AGENTS,
  "skipper.v1.NodeService/ClaimNextWorkOrder": FOR_AGENTS,
  "skipper.v1.NodeService/WatchWorkOrders": FOR_AGENTS,
  "skipper.v1.NodeService/ReportResourceState": FOR_AGENTS,
  "skipper.v1.NodeService/Session": FOR_AGENTS,
  "skipper.v1.NodeService/ListRelayTargets": "for relays: skippy --relay calls it with its node credential",
  "skipper.v1.WorkOrderService/ClaimWorkOrder": FOR_AGENTS,
  "skipper.v1.WorkOrderService/RenewWorkOrderLease": FOR_AGENTS,
  "skipper.v1.WorkOrderService/ReportWorkOrderResult": FOR_AGENTS,
  "skipper.v1.WorkOrderService/ClaimWorkOrders": FOR_AGENTS,
  "skipper.v1.WorkOrderService/ReportWorkOrderResults": FOR_AGENTS,
  "skipper.v1.WorkOrderService/GetWorkOrderSecrets": FOR_AGENTS,
  "skipper.v1.EnrollmentService/EnrollNode": "for agents: skippy --enroll-token on the host (the key pair never leaves it)",
  "skipper.v1.EnrollmentService/RenewNodeCertificate": FOR_AGENTS,
};
