// Removes what a benchmark's compose projects left on a Docker engine: every container labelled
// with one of the projects, whatever state it is in.
import { execFileSync } from "node:child_process";

export function removeProjects(engine: string, projects: Iterable<string>): void {
  const env = { ...process.env, DOCKER_HOST: engine };
  for (const project of projects) {
    const ids = execFileSync("docker", ["ps", "-aq", "--filter", `label=com.docker.compose.project=${project}`], { encoding: "utf8", env })
      .split("\n")
      .filter(Boolean);
    if (ids.length > 0) execFileSync("docker", ["rm", "-f", ...ids], { env, stdio: "ignore" });
  }
}
