// A private image registry on loopback for tests: Debian's docker-registry with htpasswd logins
// (bcrypt, from apache2-utils' htpasswd), and a push of a local image into it that leaves the
// host's own Docker config alone.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { freePort, waitFor } from "./processes.js";

export interface TestRegistry {
  /** host:port, as image references name it. */
  host: string;
  username: string;
  password: string;
  /** Tags `image` as host/`repo` and pushes it (logged in through a throwaway Docker config). */
  push(image: string, repo: string): Promise<string>;
  /** The digest the registry serves for `repo:tag` (what `repo@digest` pulls). */
  digest(repo: string, tag: string): Promise<string>;
  stop(): Promise<void>;
}

/** True when the registry and htpasswd are installed (scripts/docker-engine.sh install). */
export async function registryInstalled(): Promise<boolean> {
  const has = async (cmd: string) => (await execa("sh", ["-c", `command -v ${cmd}`], { reject: false })).exitCode === 0;
  return (await has("docker-registry")) && (await has("htpasswd"));
}

export async function startRegistry(dockerHost: string, username: string, password: string): Promise<TestRegistry> {
  const dir = await mkdtemp(join(tmpdir(), "skipper-registry-"));
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const htpasswd = (await execa("htpasswd", ["-Bbn", username, password])).stdout;
  await writeFile(join(dir, "htpasswd"), `${htpasswd.trim()}\n`);
  await mkdir(join(dir, "storage"));
  await writeFile(
    join(dir, "config.yml"),
    [
      "version: 0.1",
      "log: {level: warn}",
      `storage: {filesystem: {rootdirectory: ${join(dir, "storage")}}}`,
      `http: {addr: "${host}"}`,
      `auth: {htpasswd: {realm: skipper-test, path: ${join(dir, "htpasswd")}}}`,
      "",
    ].join("\n"),
  );
  const child: ChildProcess = spawn("docker-registry", ["serve", join(dir, "config.yml")], { stdio: "ignore" });
  await waitFor(
    "the registry to answer",
    async () => {
      const r = await fetch(`http://${host}/v2/`).catch(() => undefined);
      return r?.status === 401 ? true : undefined;
    },
    30_000,
  );
  const env = { DOCKER_HOST: dockerHost, DOCKER_CONFIG: join(dir, "docker-config") };
  return {
    host,
    username,
    password,
    async push(image, repo) {
      const ref = `${host}/${repo}`;
      await execa("docker", ["tag", image, ref], { env });
      await execa("docker", ["login", "--username", username, "--password-stdin", host], { env, input: password });
      await execa("docker", ["push", ref], { env });
      await execa("docker", ["logout", host], { env });
      // Gone from the engine: whoever runs it next must pull it.
      await execa("docker", ["rmi", ref], { env });
      return ref;
    },
    async digest(repo, tag) {
      const auth = Buffer.from(`${username}:${password}`).toString("base64");
      const head = await fetch(`http://${host}/v2/${repo}/manifests/${tag}`, {
        method: "HEAD",
        headers: {
          authorization: `Basic ${auth}`,
          accept: "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json",
        },
      });
      const digest = head.headers.get("docker-content-digest");
      if (!digest) throw new Error(`no digest for ${repo}:${tag} (${head.status})`);
      return digest;
    },
    async stop() {
      child.kill("SIGTERM");
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * An image of its own, tagged `image`: skipper-busybox:local with /www/version holding `content`
 * (busybox httpd serves it). Its own id, so pulling it by digest leaves the suite's shared image alone.
 */
export async function versionImage(dockerHost: string, image: string, content: string): Promise<void> {
  const env = { DOCKER_HOST: dockerHost };
  const name = `build-${image.replace(/[^A-Za-z0-9_.-]/g, "-")}-${Date.now()}`;
  await execa("docker", ["run", "--name", name, "skipper-busybox:local", "sh", "-c", `mkdir -p /www && echo ${content} > /www/version`], {
    env,
  });
  await execa("docker", ["commit", name, image], { env });
  await execa("docker", ["rm", name], { env });
}
