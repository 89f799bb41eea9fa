import { describe, expect, it } from "vitest";
import { ComposePolicyLevel } from "../gen/skipper/v1/resource_pb.js";
import { composeViolations } from "./compose-policy.js";

const RESTRICTED = { level: ComposePolicyLevel.RESTRICTED, allowedHostPaths: ["/srv/shared"] };
const BASELINE = { level: ComposePolicyLevel.BASELINE, allowedHostPaths: [] };

const svc = (body: string) => `services:\n  web:\n    image: nginx\n${body}`;
const rules = (file: string, r = RESTRICTED) => composeViolations(file, r).map((v) => `${v.path} ${v.rule}`);

describe("compose policy", () => {
  it.each([
    ["    privileged: true\n", "services.web.privileged privileged"],
    ["    pid: host\n", "services.web.pid host-namespace"],
    ["    ipc: host\n", "services.web.ipc host-namespace"],
    ["    network_mode: host\n", "services.web.network_mode host-namespace"],
    ["    network_mode: container:other-tenant-db\n", "services.web.network_mode container-namespace"],
    ["    userns_mode: host\n", "services.web.userns_mode host-namespace"],
    ["    volumes:\n      - /:/host\n", "services.web.volumes[0] docker-socket"],
    ["    volumes:\n      - /var/run/docker.sock:/var/run/docker.sock\n", "services.web.volumes[0] docker-socket"],
    ["    volumes:\n      - /etc:/etc2:ro\n", "services.web.volumes[0] host-path"],
    ["    volumes:\n      - ../../other/secrets:/s\n", "services.web.volumes[0] host-path"],
    ["    volumes:\n      - ~/.ssh:/k\n", "services.web.volumes[0] host-path"],
    ["    volumes:\n      - type: bind\n        source: /root\n        target: /r\n", "services.web.volumes[0].source host-path"],
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a compose file's own interpolation, as a user writes it
    ["    volumes:\n      - ${HOSTDIR}:/data\n", "services.web.volumes[0] interpolated"],
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a compose file's own interpolation, as a user writes it
    ["    privileged: ${PRIV}\n", "services.web.privileged interpolated"],
    ["    devices:\n      - /dev/sda:/dev/sda\n", "services.web.devices devices"],
    ["    cap_add: [SYS_ADMIN]\n", "services.web.cap_add[0] capability"],
    ["    cap_add: [CHOWN]\n", "services.web.cap_add[0] capability"],
    ["    security_opt: ['seccomp:unconfined']\n", "services.web.security_opt[0] unconfined"],
    ["    sysctls:\n      kernel.core_pattern: '|/x'\n", "services.web.sysctls.kernel.core_pattern sysctl"],
    ["    env_file: /etc/environment\n", "services.web.env_file[0] host-path"],
    ["    build: /\n", "services.web.build docker-socket"],
  ])("refuses %j", (body, expected) => {
    expect(rules(svc(body))).toEqual([expected]);
  });

  it("refuses what reaches the host through top-level keys, merge keys and drivers", () => {
    const file = [
      "x-priv: &priv",
      "  privileged: true",
      "services:",
      "  web:",
      "    <<: *priv",
      "    image: nginx",
      "secrets:",
      "  shadow:",
      "    file: /etc/shadow",
      "volumes:",
      "  root:",
      "    driver_opts: {type: none, o: bind, device: /}",
      "  plugin:",
      "    driver: rexray",
      "networks:",
      "  n:",
      "    driver: macvlan",
      "include:",
      "  - /opt/other/compose.yml",
    ].join("\n");
    expect(rules(file).sort()).toEqual(
      [
        "include[0] host-path",
        "services.web.privileged privileged",
        "secrets.shadow.file host-path",
        "volumes.root.driver_opts.device docker-socket",
        "volumes.plugin.driver driver",
        "networks.n.driver driver",
      ].sort(),
    );
  });

  it("lets through what stays in the container, the project directory and the allowed host paths", () => {
    const file = svc(
      [
        "    ports: ['8080:80']",
        "    volumes:",
        "      - data:/data",
        "      - ./conf:/etc/nginx/conf.d:ro",
        "      - /srv/shared/static:/static",
        "      - /cache",
        "      - type: tmpfs",
        "        target: /tmp",
        "    cap_add: [NET_BIND_SERVICE]",
        "    cap_drop: [ALL]",
        "    privileged: false",
        "    network_mode: service:other",
        "    env_file: .env",
        "    environment:",
        // biome-ignore lint/suspicious/noTemplateCurlyInString: a compose file's own interpolation
        "      A: ${A}",
        "    sysctls: ['net.ipv4.ip_unprivileged_port_start=0']",
        "volumes:",
        "  data: {}",
        "",
      ].join("\n"),
    );
    expect(rules(file)).toEqual([]);
  });

  it("baseline allows Docker's default capabilities and any driver; privileged and unspecified check nothing", () => {
    const caps = svc("    cap_add: [CHOWN, KILL]\nvolumes:\n  v:\n    driver: rexray\n");
    expect(rules(caps, BASELINE)).toEqual([]);
    expect(rules(caps)).toEqual(["services.web.cap_add[0] capability", "services.web.cap_add[1] capability", "volumes.v.driver driver"]);
    const priv = svc("    privileged: true\n");
    expect(rules(priv, { level: ComposePolicyLevel.PRIVILEGED, allowedHostPaths: [] })).toEqual([]);
    expect(rules(priv, { level: ComposePolicyLevel.UNSPECIFIED, allowedHostPaths: [] })).toEqual([]);
  });
});
