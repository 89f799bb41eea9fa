import { describe, expect, it } from "vitest";
import { isLoopbackHost, registryEndpoint } from "./registry-endpoint.js";

describe("registryEndpoint", () => {
  const cases: [string, { registry: string; origin: string; path: string }][] = [
    ["127.0.0.1:5000/shop/web", { registry: "127.0.0.1:5000", origin: "http://127.0.0.1:5000", path: "shop/web" }],
    ["localhost:5000/web", { registry: "localhost:5000", origin: "http://localhost:5000", path: "web" }],
    ["[::1]:5000/a/b", { registry: "[::1]:5000", origin: "http://[::1]:5000", path: "a/b" }],
    ["127.9.8.7/a", { registry: "127.9.8.7", origin: "http://127.9.8.7", path: "a" }],
    ["registry.example.com/shop/web", { registry: "registry.example.com", origin: "https://registry.example.com", path: "shop/web" }],
    ["10.0.0.5:5000/a", { registry: "10.0.0.5:5000", origin: "https://10.0.0.5:5000", path: "a" }],
    ["docker.io/nginx", { registry: "docker.io", origin: "https://registry-1.docker.io", path: "library/nginx" }],
    ["docker.io/bitnami/redis", { registry: "docker.io", origin: "https://registry-1.docker.io", path: "bitnami/redis" }],
    ["nginx", { registry: "docker.io", origin: "https://registry-1.docker.io", path: "library/nginx" }],
  ];
  it.each(cases)("%s", (repository, want) => {
    expect(registryEndpoint(repository)).toEqual({ ...want, repository });
  });

  it.each(["127.0.0.1:5000/web:1.0", `127.0.0.1:5000/web@sha256:${"a".repeat(64)}`, "Shop/Web", ""])(
    "%j is INVALID_REPOSITORY",
    (repository) => {
      expect(() => registryEndpoint(repository)).toThrow(expect.objectContaining({ code: "INVALID_REPOSITORY" }));
    },
  );
});

describe("isLoopbackHost", () => {
  it.each([
    ["localhost", true],
    ["LOCALHOST", true],
    ["127.0.0.1", true],
    ["127.255.0.9", true],
    ["[::1]", true],
    ["::1", true],
    ["127.0.0.256", false],
    ["128.0.0.1", false],
    ["localhost.example.com", false],
    ["127.0.0.1.nip.io", false],
  ])("%s: %s", (host, want) => {
    expect(isLoopbackHost(host)).toBe(want);
  });
});
