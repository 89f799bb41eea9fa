// The rules of a container spec (common/container-rules.ts), which the controller applies before
// queuing a deploy_container order and the agent again before running one, and the digest
// matching of the executor's image step (agent/executors/container-image.ts).
import { describe, expect, it } from "vitest";
import { containerSpecProblem, type ContainerRequest } from "../common/container-rules.js";
import { digestOf, matchesDigest, repositoryOf } from "../agent/executors/container-image.js";

const D1 = `sha256:${"a".repeat(64)}`;
const D2 = `sha256:${"b".repeat(64)}`;
const ok: ContainerRequest = {
  name: "web",
  image: "registry.example:5000/team/web:1.4",
  digest: D1,
  args: ["serve", "--port", "80"],
  env: { API_TOKEN: "x", MODE: "prod" },
  ports: [{ hostPort: 8080, containerPort: 80, protocol: "tcp", hostIp: "127.0.0.1" }],
  mounts: [
    { source: "web-data", target: "/data", readOnly: false },
    { source: "./conf", target: "/etc/web", readOnly: true },
  ],
  labels: { team: "web" },
  restartPolicy: "on-failure:3",
  healthCommand: "wget -qO- localhost/health",
  stopTimeoutSeconds: 10,
};
const problem = (change: Partial<ContainerRequest>) => containerSpecProblem({ ...ok, ...change }, "spec")?.field;

describe("container spec rules", () => {
  it("a full spec passes", () => {
    expect(containerSpecProblem(ok, "spec")).toBeUndefined();
  });

  it.each([
    ["a name ending in -previous (the executor's)", { name: "web-previous" }, "spec.name"],
    ["an uppercase name", { name: "Web" }, "spec.name"],
    ["an image that is not a reference", { image: "Team/Web" }, "spec.image"],
    ["a digest that is not sha256", { digest: "md5:abc" }, "spec.digest"],
    ["a digest that differs from the reference's own", { image: `web@${D2}` }, "spec.digest"],
    ["a value on two lines (the engine reads an env file)", { env: { A: "1\n2" } }, "spec.env.A"],
    ["a bad variable name", { env: { "1A": "x" } }, "spec.env"],
    ["a port out of range", { ports: [{ hostPort: 0, containerPort: 70000, protocol: "", hostIp: "" }] }, "spec.ports[0].container_port"],
    ["a host path outside the agent's directory", { mounts: [{ source: "/etc", target: "/x", readOnly: false }] }, "spec.mounts[0].source"],
    ["a ./path climbing out", { mounts: [{ source: "./../x", target: "/x", readOnly: false }] }, "spec.mounts[0].source"],
    ["mount syntax in a target", { mounts: [{ source: "v", target: "/x,readonly=false", readOnly: false }] }, "spec.mounts[0].target"],
    ["a skipper.* label", { labels: { "skipper.container": "other" } }, "spec.labels.skipper.container"],
    ["an unknown restart policy", { restartPolicy: "sometimes" }, "spec.restart_policy"],
  ])("refuses %s", (_what, change, field) => {
    expect(problem(change as Partial<ContainerRequest>)).toBe(field);
  });
});

describe("digest matching", () => {
  const image = { id: D2, repoDigests: [`registry.example:5000/team/web@${D1}`, `busybox@${D2}`] };

  it("a repo digest counts for its own repository only; the image id counts for any", () => {
    expect(matchesDigest(image, "registry.example:5000/team/web", D1)).toBe(true);
    expect(matchesDigest(image, "other/web", D1)).toBe(false);
    expect(matchesDigest(image, "other/web", D2)).toBe(true);
  });

  it("Docker Hub's long names are its short ones", () => {
    expect(repositoryOf("docker.io/library/busybox:1.36")).toBe("busybox");
    expect(matchesDigest(image, repositoryOf("docker.io/library/busybox"), D2)).toBe(true);
    expect(digestOf(image, "busybox")).toBe(D2);
    expect(digestOf({ id: D1, repoDigests: [] }, "web")).toBe(D1);
  });
});
