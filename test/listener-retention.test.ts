// A closed HTTP/2 connection is not held by the controller after it closed: Node 20 leaves a
// closed session's idle timer armed (server/listener.ts releaseIdleTimer), which held each closed
// connection for the 5-minute idle timeout, 4-8 KB apiece, so a fleet reconnecting after a
// restart held every old connection. Measured in a process of its own with --expose-gc (the
// heap after a collection), over the built listener, as npm test builds it first.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const LISTENER = fileURLToPath(new URL("../dist/controller/server/listener.js", import.meta.url));
const SCRIPT = fileURLToPath(new URL("./fixtures/connection-retention.mjs", import.meta.url));

it("holds nothing of a closed connection: 300 connections opened and closed leave under 1 KB each on the heap", () => {
  const out = execFileSync(process.execPath, ["--expose-gc", SCRIPT, LISTENER, "300"], { encoding: "utf8", timeout: 60_000 });
  const { bytesPerConnection } = JSON.parse(out.trim().split("\n").at(-1)!) as { bytesPerConnection: number };
  // With the timer left armed: about 4,300 bytes each (h2c; more with TLS). Released: about 100.
  expect(bytesPerConnection).toBeLessThan(1024);
});
