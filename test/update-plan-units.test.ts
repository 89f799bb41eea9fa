// Which services a deploy updates start-first (agent/executors/update-plan.ts): only a changing
// service that asks for it and can run twice; every other changing service is stop-first with
// the reason the result shows; unchanged and new services are not updates at all.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ContainerObservationSchema, type ContainerObservation } from "../gen/skipper/v1/resource_pb.js";
import { ProxyRouteSchema, UpdateOrder } from "../gen/skipper/v1/proxy_pb.js";
import { planUpdates } from "../agent/executors/update-plan.js";

const START = "    deploy: {update_config: {order: start-first}}\n";
const file = [
  "services:",
  `  web:\n    image: w\n${START}`,
  `  api:\n    image: a\n    ports: ['8080:80']\n${START}`,
  `  named:\n    image: n\n    container_name: fixed\n${START}`,
  "  many:\n    image: m\n    deploy: {replicas: 3, update_config: {order: start-first}}\n",
  "  plain:\n    image: p\n",
  `  same:\n    image: s\n${START}`,
  `  fresh:\n    image: f\n${START}`,
  `  hostnet:\n    image: h\n    network_mode: host\n${START}`,
  `  sidecar:\n    image: c\n    network_mode: "service:web"\n${START}`,
  `  joined:\n    image: j\n    network_mode: "container:abc"\n${START}`,
  `  pinned:\n    image: i\n    networks: {front: {ipv4_address: 10.5.0.5}, back: {ipv6_address: "fd00::5"}}\n${START}`,
  `  macced:\n    image: k\n    mac_address: 02:42:ac:11:00:02\n${START}`,
  `  netmac:\n    image: l\n    networks: {front: {mac_address: "02:42:ac:11:00:03"}}\n${START}`,
  `  listed:\n    image: o\n    networks: [front]\n    network_mode: bridge\n${START}`,
].join("\n");
const pinnedKinds = ["hostnet", "sidecar", "joined", "pinned", "macced", "netmac", "listed"];
const running = (service: string, hash: string) =>
  [service, [create(ContainerObservationSchema, { name: `shop_${service}_1`, state: "running", configHash: hash })]] as [
    string,
    ContainerObservation[],
  ];
const before = {
  byService: new Map([
    running("web", "old"),
    running("api", "old"),
    running("named", "old"),
    running("many", "old"),
    running("plain", "old"),
    running("same", "h-same"),
    ...pinnedKinds.map((k) => running(k, "old")),
  ]),
};
const hashes = new Map(
  ["web", "api", "named", "many", "plain", "same", "fresh", ...pinnedKinds].map((s) => [s, s === "same" ? "h-same" : `new-${s}`]),
);
const routes = [
  create(ProxyRouteSchema, { host: "shop.example", service: "web", port: 80 }),
  create(ProxyRouteSchema, { service: "api", port: 80 }),
];

describe("the update plan", () => {
  it("starts first only what asks and can run twice, and says why for the rest", () => {
    const plan = planUpdates(file, routes, before, hashes);
    expect(plan.startFirst).toEqual(["listed", "web"]);
    const why = Object.fromEntries(plan.updates.map((u) => [u.service, `${UpdateOrder[u.order]}: ${u.reason}`]));
    expect(why).toEqual({
      web: "START_FIRST: start-first: behind route shop.example/ -> :80",
      api: "STOP_FIRST: stop-first: publishes host port 8080, which two containers cannot bind (its route reaches it without one)",
      named: "STOP_FIRST: stop-first: sets container_name fixed, which two containers cannot share",
      many: "STOP_FIRST: stop-first: runs 3 replicas (start-first takes one)",
      plain: "STOP_FIRST: stop-first: no update order declared (deploy.update_config.order)",
      hostnet: "STOP_FIRST: stop-first: uses network_mode host, whose ports a second container cannot bind beside the first",
      sidecar: "STOP_FIRST: stop-first: uses network_mode service:web, whose ports a second container cannot bind beside the first",
      joined: "STOP_FIRST: stop-first: uses network_mode container:abc, whose ports a second container cannot bind beside the first",
      pinned: "STOP_FIRST: stop-first: sets ipv4_address 10.5.0.5 on front, ipv6_address fd00::5 on back, which two containers cannot hold",
      macced: "STOP_FIRST: stop-first: sets mac_address 02:42:ac:11:00:02, which two containers cannot hold",
      netmac: "STOP_FIRST: stop-first: sets mac_address 02:42:ac:11:00:03 on front, which two containers cannot hold",
      listed: "START_FIRST: start-first: asked for, no route (nothing to switch)",
    });
    expect(plan.updates.find((u) => u.service === "web")?.oldContainers).toEqual(["shop_web_1"]);
  });
  it("a first deploy updates nothing", () => {
    expect(planUpdates(file, routes, { byService: new Map() }, hashes)).toEqual({
      startFirst: [],
      updates: [],
      stopGraceSeconds: new Map(),
    });
  });
});
