// The e2e tests' "not healthy until the test says so" services: their healthcheck waits for
// /tmp/ready in the container, so an order runs until the test has seen what it waits for.
import { execa } from "execa";

/** Creates /tmp/ready in every running container of `service` in compose project `project`. */
export async function markReady(dockerHost: string, project: string, service: string): Promise<void> {
  const env = { DOCKER_HOST: dockerHost };
  const r = await execa(
    "docker",
    ["ps", "-q", "--filter", `label=com.docker.compose.project=${project}`, "--filter", `label=com.docker.compose.service=${service}`],
    { env },
  );
  for (const id of r.stdout.split("\n").filter(Boolean)) await execa("docker", ["exec", id, "touch", "/tmp/ready"], { env, reject: false });
}
