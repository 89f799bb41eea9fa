// The cause read from real Compose output: v1 (docker-compose 1.29, Debian) as printed on a real
// engine for these tests, v2 (the docker compose plugin) as it prints the same engine errors.
import { describe, expect, it } from "vitest";
import { FailureReason } from "../gen/skipper/v1/failure_cause_pb.js";
import { failureCause, failureHeadline, isPermanentReason, reasonName, retriableWith } from "./failure-cause.js";

const V1 = {
  port: `Creating network "causesport_default" with the default driver
Creating causesport_web_1 ...
Host is already in use by another container
Creating causesport_web_1 ... error

ERROR: for causesport_web_1  Cannot start service web: driver failed programming external connectivity on endpoint causesport_web_1 (e37c263bb7cd): Error starting userland proxy: listen tcp4 127.0.0.1:28932: bind: address already in use

ERROR: for web  Cannot start service web: driver failed programming external connectivity on endpoint causesport_web_1 (e37c263bb7cd): Error starting userland proxy: listen tcp4 127.0.0.1:28932: bind: address already in use
ERROR: Encountered errors while bringing up the project.`,
  dns: `Creating network "causesdns_default" with the default driver
Pulling web (nonexistent.invalid:5000/x:1)...
Get "https://nonexistent.invalid:5000/v2/": dial tcp: lookup nonexistent.invalid on 10.255.255.53:53: no such host`,
  hubOffline: `Pulling web (skipperdoesnotexist/nothing:1)...
Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host`,
  ref: `Creating network "causesref_default" with the default driver
no such image: Busybox::Stable!: invalid reference format: repository name must be lowercase`,
  noCredentials: `Pulling web (127.0.0.1:28950/x/missing:1)...
Head "http://127.0.0.1:28950/v2/x/missing/manifests/1": no basic auth credentials`,
  missing: `Pulling web (127.0.0.1:28951/x/missing:1)...
manifest for 127.0.0.1:28951/x/missing:1 not found: manifest unknown: manifest unknown`,
  refused: `Pulling web (127.0.0.1:28959/x/missing:1)...
Get "http://127.0.0.1:28959/v2/": dial tcp 127.0.0.1:28959: connect: connection refused`,
  mount: `Creating p_web_1 ... error

ERROR: for web  Cannot start service web: error while creating mount source path '/srv/data': mkdir /srv/data: permission denied
ERROR: Encountered errors while bringing up the project.`,
  other: `Creating p_web_1 ... error

ERROR: for web  Cannot start service web: OCI runtime create failed: container_linux.go:380: starting container process caused: exec: "nope": executable file not found in $PATH: unknown
ERROR: Encountered errors while bringing up the project.`,
};

const V2 = {
  port: ` Network p_default  Creating
 Network p_default  Created
 Container p-web-1  Creating
 Container p-web-1  Created
 Container p-web-1  Starting
Error response from daemon: driver failed programming external connectivity on endpoint p-web-1 (6f3c2a): Error starting userland proxy: listen tcp4 127.0.0.1:28932: bind: address already in use`,
  allocated: ` Container p-web-1  Starting
Error response from daemon: driver failed programming external connectivity on endpoint p-web-1 (6f3c2a): Bind for 0.0.0.0:8080 failed: port is already allocated`,
  dns: ` web Pulling
 web Error Get "https://nonexistent.invalid:5000/v2/": dial tcp: lookup nonexistent.invalid: no such host
Error response from daemon: Get "https://nonexistent.invalid:5000/v2/": dial tcp: lookup nonexistent.invalid: no such host`,
  servfail: `Error response from daemon: Get "https://registry.example.com/v2/": dial tcp: lookup registry.example.com on 127.0.0.53:53: server misbehaving`,
  rate: ` web Error toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit
Error response from daemon: toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading: https://www.docker.com/increase-rate-limit`,
  denied: ` web Error pull access denied for private/thing, repository does not exist or may require 'docker login': denied: requested access to the resource is denied
Error response from daemon: pull access denied for private/thing, repository does not exist or may require 'docker login': denied: requested access to the resource is denied`,
  unauthorized: `Error response from daemon: Head "https://registry.example.com/v2/team/app/manifests/1": unauthorized: authentication required`,
  missing: ` web Error manifest for registry.example.com/team/app:1.2 not found: manifest unknown: manifest unknown
Error response from daemon: manifest for registry.example.com/team/app:1.2 not found: manifest unknown: manifest unknown`,
  ref: `Error response from daemon: invalid reference format: repository name (library/Busybox) must be lowercase`,
  disk: ` web Error failed to register layer: write /usr/lib/x86_64-linux-gnu/libLLVM.so.15: no space left on device
Error response from daemon: failed to register layer: write /usr/lib/x86_64-linux-gnu/libLLVM.so.15: no space left on device`,
  timeout: `Error response from daemon: Get "https://registry.example.com/v2/": net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers)`,
};

describe("the cause of a failure", () => {
  it("a held host port, from Compose v1 and v2, names the address and is not retried", () => {
    for (const out of [V1.port, V2.port]) {
      const c = failureCause(out);
      expect(c.reason).toBe(FailureReason.PORT_IN_USE);
      expect(c.summary).toBe("port 127.0.0.1:28932 is already in use");
      expect(c.line).toContain("listen tcp4 127.0.0.1:28932: bind: address already in use");
    }
    expect(failureCause(V2.allocated)).toMatchObject({ reason: FailureReason.PORT_IN_USE, summary: "port 0.0.0.0:8080 is already in use" });
    expect(isPermanentReason(FailureReason.PORT_IN_USE)).toBe(true);
  });

  it("an unknown registry host is REGISTRY_HOST_UNKNOWN (not retried); a failing DNS server or Docker Hub unresolved is unreachable (retried)", () => {
    for (const out of [V1.dns, V2.dns]) {
      expect(failureCause(out)).toMatchObject({
        reason: FailureReason.REGISTRY_HOST_UNKNOWN,
        summary: "registry host nonexistent.invalid is unknown (DNS: no such host)",
      });
    }
    expect(isPermanentReason(FailureReason.REGISTRY_HOST_UNKNOWN)).toBe(true);
    const servfail = failureCause(V2.servfail);
    expect(servfail.reason).toBe(FailureReason.REGISTRY_UNREACHABLE);
    expect(servfail.summary).toContain("registry registry.example.com: DNS did not answer");
    expect(failureCause(V1.hubOffline).reason).toBe(FailureReason.REGISTRY_UNREACHABLE);
    expect(failureCause(V1.refused)).toMatchObject({ reason: FailureReason.REGISTRY_UNREACHABLE });
    expect(failureCause(V1.refused).summary).toContain("127.0.0.1:28959");
    expect(failureCause(V2.timeout).reason).toBe(FailureReason.REGISTRY_UNREACHABLE);
    expect(isPermanentReason(FailureReason.REGISTRY_UNREACHABLE)).toBe(false);
  });

  it("a registry that asks for credentials or denies access is UNAUTHORIZED", () => {
    expect(failureCause(V1.noCredentials)).toMatchObject({
      reason: FailureReason.UNAUTHORIZED,
      summary: "the registry 127.0.0.1:28950 asked for credentials",
    });
    expect(failureCause(V2.unauthorized).reason).toBe(FailureReason.UNAUTHORIZED);
    expect(failureCause(V2.denied)).toMatchObject({
      reason: FailureReason.UNAUTHORIZED,
      summary: "the registry refused to pull private/thing (it does not exist or needs a login)",
    });
  });

  it("a missing image, a bad reference, a full disk, a denied path", () => {
    expect(failureCause(V1.missing)).toMatchObject({
      reason: FailureReason.IMAGE_NOT_FOUND,
      summary: "image 127.0.0.1:28951/x/missing:1 was not found in its registry",
    });
    expect(failureCause(V2.missing).summary).toBe("image registry.example.com/team/app:1.2 was not found in its registry");
    expect(failureCause(V1.ref)).toMatchObject({
      reason: FailureReason.INVALID_REFERENCE,
      summary: "image reference Busybox::Stable! is not valid (repository name must be lowercase)",
    });
    expect(failureCause(V2.ref).reason).toBe(FailureReason.INVALID_REFERENCE);
    expect(failureCause(V2.disk)).toMatchObject({ reason: FailureReason.NO_SPACE });
    expect(isPermanentReason(FailureReason.NO_SPACE)).toBe(false);
    expect(failureCause(V2.rate).reason).toBe(FailureReason.RATE_LIMITED);
    expect(isPermanentReason(FailureReason.RATE_LIMITED)).toBe(false);
    expect(failureCause(V1.mount)).toMatchObject({ reason: FailureReason.PERMISSION_DENIED, summary: "permission denied on /srv/data" });
  });

  it("anything else is UNKNOWN with the line that matters, not Compose's closing words, and is retried", () => {
    const c = failureCause(V1.other);
    expect(c.reason).toBe(FailureReason.UNKNOWN);
    expect(c.line).toContain('exec: "nope": executable file not found');
    expect(c.summary).toMatch(/^Cannot start service web: OCI runtime create failed/);
    expect(failureCause("", "compose up failed")).toMatchObject({ reason: FailureReason.UNKNOWN, line: "compose up failed" });
    expect(isPermanentReason(FailureReason.UNKNOWN)).toBe(false);
  });

  it("keeps lines short and writes a headline with the cause first", () => {
    expect(failureCause(`Error: ${"x".repeat(2000)}`).line.length).toBeLessThanOrEqual(500);
    const c = failureCause(V1.port);
    expect(failureHeadline("COMPOSE_FAILED", "compose up failed (exit 1)", c)).toBe(
      "port 127.0.0.1:28932 is already in use (COMPOSE_FAILED)",
    );
    expect(failureHeadline("COMPOSE_FAILED", "compose up failed (exit 1)")).toBe("COMPOSE_FAILED: compose up failed (exit 1)");
    expect(reasonName(FailureReason.PORT_IN_USE)).toBe("port_in_use");
  });

  it("decides the retry: a permanent cause never, a Compose run's passing cause always, a run's own codes as they said", () => {
    const port = failureCause(V1.port);
    expect(retriableWith("COMPOSE_FAILED", true, port)).toBe(false);
    expect(retriableWith("IMAGE_PULL_FAILED", false, failureCause(V2.rate))).toBe(true);
    expect(retriableWith("IMAGE_PULL_FAILED", false, failureCause(V1.refused))).toBe(true);
    expect(retriableWith("COMPOSE_FAILED", true, failureCause(V1.other))).toBe(true);
    expect(
      retriableWith("DOCKER_UNAVAILABLE", true, failureCause("permission denied while trying to connect to the Docker daemon socket")),
    ).toBe(true);
    expect(retriableWith("COMMAND_FAILED", false, failureCause(V2.disk))).toBe(false);
  });
});
