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
].join("\n");
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
  ]),
};
const hashes = new Map(["web", "api", "named", "many", "plain", "same", "fresh"].map((s) => [s, s === "same" ? "h-same" : `new-${s}`]));
const routes = [
  create(ProxyRouteSchema, { host: "shop.example", service: "web", port: 80 }),
  create(ProxyRouteSchema, { service: "api", port: 80 }),
];

describe("the update plan", () => {
  it("starts first only what asks and can run twice, and says why for the rest", () => {
    const plan = planUpdates(file, routes, before, hashes);
    expect(plan.startFirst).toEqual(["web"]);
    const why = Object.fromEntries(plan.updates.map((u) => [u.service, `${UpdateOrder[u.order]}: ${u.reason}`]));
    expect(why).toEqual({
      web: "START_FIRST: start-first: behind route shop.example/ -> :80",
      api: "STOP_FIRST: stop-first: publishes host port 8080, which two containers cannot bind (its route reaches it without one)",
      named: "STOP_FIRST: stop-first: sets container_name fixed, which two containers cannot share",
      many: "STOP_FIRST: stop-first: runs 3 replicas (start-first takes one)",
      plain: "STOP_FIRST: stop-first: no update order declared (deploy.update_config.order)",
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
