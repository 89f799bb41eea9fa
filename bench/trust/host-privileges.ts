// Compose files a tenant confined to its containers may not write: each asks the host for more
// (privileges, host namespaces, devices, host paths, the Docker socket, plugin drivers), directly,
// through ${VAR} interpolation or through YAML merge keys. The scope-confinement probe writes each.

/** A compose file of one service that asks for nothing. */
export const PLAIN = "services:\n  web:\n    image: busybox\n";

/** Compose files whose service asks the host for more than its container: [name, compose file, env]. */
export const PRIVILEGES: [string, string, Record<string, string>?][] = [
  ["privileged", `${PLAIN}    privileged: true\n`],
  ["host pid", `${PLAIN}    pid: host\n`],
  ["host network", `${PLAIN}    network_mode: host\n`],
  ["host ipc", `${PLAIN}    ipc: host\n`],
  ["host user namespace", `${PLAIN}    userns_mode: host\n`],
  ["another container's network", `${PLAIN}    network_mode: "container:scope-t2-web-1"\n`],
  ["cap_add SYS_ADMIN", `${PLAIN}    cap_add: [SYS_ADMIN]\n`],
  ["cap_add ALL", `${PLAIN}    cap_add: [ALL]\n`],
  ["a device", `${PLAIN}    devices: ['/dev/sda:/dev/sda']\n`],
  ["/ bind-mounted", `${PLAIN}    volumes: ['/:/host']\n`],
  ["/ bind-mounted, long syntax", `${PLAIN}    volumes:\n      - type: bind\n        source: /\n        target: /host\n`],
  ["the Docker socket", `${PLAIN}    volumes: ['/var/run/docker.sock:/var/run/docker.sock']\n`],
  ["the Docker socket through /run", `${PLAIN}    volumes: ['/run/docker.sock:/var/run/docker.sock']\n`],
  ["an env file from the host", `${PLAIN}    env_file: [/etc/shadow]\n`],
  ["unconfined seccomp", `${PLAIN}    security_opt: ['seccomp:unconfined']\n`],
  ["unconfined AppArmor", `${PLAIN}    security_opt: ['apparmor:unconfined']\n`],
  ["an unsafe sysctl", `${PLAIN}    sysctls: {kernel.msgmax: 65536}\n`],
  // biome-ignore lint/suspicious/noTemplateCurlyInString: compose interpolation, as a tenant writes it
  ["privileged: ${PRIV}", `${PLAIN}    privileged: \${PRIV}\n`, { PRIV: "true" }],
  // biome-ignore lint/suspicious/noTemplateCurlyInString: compose interpolation, as a tenant writes it
  ["privileged: ${PRIV:-true}, unset", `${PLAIN}    privileged: \${PRIV:-true}\n`],
  // biome-ignore lint/suspicious/noTemplateCurlyInString: compose interpolation, as a tenant writes it
  ["network_mode: ${NET}", `${PLAIN}    network_mode: \${NET}\n`, { NET: "host" }],
  // biome-ignore lint/suspicious/noTemplateCurlyInString: compose interpolation, as a tenant writes it
  ["a bind mount of ${ROOT}", `${PLAIN}    volumes: ['\${ROOT}:/host']\n`, { ROOT: "/" }],
  // biome-ignore lint/suspicious/noTemplateCurlyInString: compose interpolation, as a tenant writes it
  ["cap_add: [${CAP}]", `${PLAIN}    cap_add: ['\${CAP}']\n`, { CAP: "SYS_ADMIN" }],
  ["merge key from an extension", "x-p: &p\n  privileged: true\nservices:\n  web:\n    <<: *p\n    image: busybox\n"],
  [
    "merge key, a list of anchors",
    "x-a: &a\n  image: busybox\nx-p: &p\n  pid: host\n  volumes: ['/:/host']\nservices:\n  web:\n    <<: [*a, *p]\n",
  ],
  ["a whole service from an anchor", "x-s: &s\n  image: busybox\n  network_mode: host\nservices:\n  web: *s\n"],
  [
    "a merge key nested in a merged map",
    "x-in: &in\n  privileged: true\nx-out: &out\n  <<: *in\n  image: busybox\nservices:\n  web:\n    <<: *out\n",
  ],
  ["a volume with a plugin driver", `${PLAIN}    volumes: ['data:/data']\nvolumes:\n  data:\n    driver: rexray/ebs\n`],
  [
    "a local volume bound to /",
    `${PLAIN}    volumes: ['data:/data']\nvolumes:\n  data:\n    driver: local\n    driver_opts: {type: none, o: bind, device: /}\n`,
  ],
  ["a network with a plugin driver", `${PLAIN}    networks: [n]\nnetworks:\n  n:\n    driver: weaveworks/net-plugin\n`],
];
