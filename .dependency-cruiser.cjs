// The import rules of ARCHITECTURE.md, checked by `npm run lint:deps` (CI runs it):
//   - no cycles anywhere outside gen/;
//   - gen/ imports nothing of ours; common/ only gen/; the agent and the CLI (clients of the
//     contract) only gen/, common/ and themselves; the controller neither of them; no program
//     the benchmarks or the tests; the dashboard (ui/, in a browser) gen/, itself and the
//     common/ modules written for a browser too (the order statuses, the wait for an order, a
//     failure's cause, the names of node liveness);
//   - inside each program, one direction: a layer imports only the layers below it;
//   - skippy-updater (agent/updater/updater*.ts) reaches none of the agent's modules.
/** The controller's layers, lowest first. A module may import its own layer and those below. */
const CONTROLLER_LAYERS = [
  ["base", "^controller/base/"],
  ["domain", "^controller/domain/"],
  ["store", "^controller/store/"],
  ["metrics", "^controller/metrics/"],
  ["tls", "^controller/tls/"],
  ["auth", "^controller/auth/"],
  ["events", "^controller/events/"],
  ["audit", "^controller/audit/"],
  ["resources", "^controller/resources/"],
  ["snapshots", "^controller/snapshots/"],
  ["nodes", "^controller/nodes/"],
  ["rollouts", "^controller/rollouts/"],
  ["delivery", "^controller/delivery/"],
  ["reconcile", "^controller/reconcile/"],
  ["dispatch", "^controller/dispatch/"],
  ["webhooks", "^controller/webhooks/"],
  ["promotion", "^controller/promotion/"],
  ["services", "^controller/services/"],
  ["boundary", "^controller/boundary/"],
  ["server", "^controller/server/"],
  ["main", "^controller/main\\.ts$"],
];

/** The agent's layers, lowest first: the engine, the host's proxy, versioned processes, executors, the loop, the relay of SSH nodes, main. */
const AGENT_LAYERS = [
  ["engine", "^agent/engine/"],
  ["proxy", "^agent/proxy/"],
  ["process", "^agent/process/"],
  ["executors", "^agent/executors/"],
  ["loop", "^agent/(?!main\\.ts$)[^/]+\\.ts$"],
  ["relay", "^agent/relay/"],
  ["main", "^agent/main\\.ts$"],
];

/** The CLI's layers: its parts (connection, manifests, diffs, tables...), the commands, the program, main. */
const CLI_LAYERS = [
  ["parts", "^cli/(?!program\\.ts$|main\\.ts$)[^/]+\\.ts$"],
  ["commands", "^cli/commands/"],
  ["program", "^cli/program\\.ts$"],
  ["main", "^cli/main\\.ts$"],
];

// Tests beside the code may use the test helpers and any layer; the rules are for the programs.
const TESTS = "\\.test\\.ts$";

/** One rule per layer of a program: it may not import any layer above it. */
function layerRules(program, layers) {
  return layers.slice(0, -1).map(([name, path], i) => ({
    name: `${program}-${name}-imports-only-below`,
    comment: `${program} layer '${name}' may not import a layer above it (${layers
      .slice(i + 1)
      .map(([n]) => n)
      .join(", ")})`,
    severity: "error",
    from: { path, pathNot: TESTS },
    to: {
      path: layers
        .slice(i + 1)
        .map(([, p]) => `(${p})`)
        .join("|"),
    },
  }));
}

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "no-circular",
      comment: "modules must not import each other in a loop",
      severity: "error",
      from: { pathNot: "^gen/" },
      to: { circular: true },
    },
    {
      name: "gen-is-generated",
      comment: "generated code imports only itself and its libraries",
      severity: "error",
      from: { path: "^gen/" },
      to: { path: "^(common|controller|agent|cli|bench|test|ui)/" },
    },
    {
      name: "common-is-shared",
      comment: "common/ is what both programs use: it imports gen/ and itself only",
      severity: "error",
      from: { path: "^common/", pathNot: TESTS },
      to: { path: "^(controller|agent|cli|bench|test)/" },
    },
    {
      name: "agent-is-a-client",
      comment: "the agent is a client of the contract: gen/, common/ and itself, never the controller",
      severity: "error",
      from: { path: "^agent/", pathNot: TESTS },
      to: { path: "^(controller|cli|bench|test)/" },
    },
    {
      name: "cli-is-a-client",
      comment: "the CLI is a client of the contract: gen/, common/ and itself, never the controller or the agent",
      severity: "error",
      from: { path: "^cli/", pathNot: TESTS },
      to: { path: "^(controller|agent|bench|test)/" },
    },
    {
      name: "dashboard-is-a-client",
      comment:
        "the dashboard runs in a browser: gen/, itself and the few common/ modules written for it too (no Node APIs), never a program's code",
      severity: "error",
      from: { path: "^ui/" },
      to: {
        path: "^(common|controller|agent|cli|bench|test)/",
        pathNot: "^common/(order-status|order-wait|failure-cause|node-liveness-name|join-line)\\.ts$",
      },
    },
    {
      name: "updater-stands-alone",
      comment:
        "skippy-updater (agent/updater/updater*.ts) undoes a broken agent version, so nothing it runs may come from the agent: it reaches node:, gen/, common/logging/ and the updater's own files (update-files.ts, updater-*.ts), never another agent or common/ module",
      severity: "error",
      from: { path: "^agent/updater/updater[^/]*\\.ts$", pathNot: TESTS },
      to: {
        reachable: true,
        path: "^(agent|common|controller|cli|bench|test|ui)/",
        pathNot: "^agent/updater/(updater[^/]*|update-files)\\.ts$|^common/logging/",
      },
    },
    {
      name: "controller-never-imports-agent",
      severity: "error",
      from: { path: "^controller/", pathNot: TESTS },
      to: { path: "^(agent|cli|bench|test)/" },
    },
    {
      name: "every-controller-module-has-a-layer",
      comment: "a new top-level controller folder or file needs its place in CONTROLLER_LAYERS",
      severity: "error",
      from: { path: "^controller/", pathNot: [...CONTROLLER_LAYERS.map(([, p]) => `(${p})`), `(${TESTS})`].join("|") },
      to: {},
    },
    ...layerRules("controller", CONTROLLER_LAYERS),
    ...layerRules("agent", AGENT_LAYERS),
    ...layerRules("cli", CLI_LAYERS),
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^(node_modules|dist)/" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: { extensions: [".ts", ".js", ".mjs", ".json"] },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
