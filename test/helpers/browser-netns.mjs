// Runs inside a network namespace of its own (`unshare --net`, started by test/helpers/browser.ts):
// brings its loopback up, listens on 127.0.0.1 at each port the tests name and carries every
// connection, bytes unchanged (TLS and all), to a Unix socket that the test process serves from the
// host's namespace; then starts chromium with the arguments and descriptors playwright gave it.
//
// Why: chromium drops every request it has in flight, loopback ones included, whenever the host's
// network interfaces change (net::ERR_NETWORK_CHANGED), and the tests' Docker engines add and
// remove bridges and veth pairs all the time. In a namespace of its own, chromium sees only its
// loopback, which never changes.
//
// Environment: SKIPPER_BROWSER_FORWARD="port=/path/to.sock,port=/path/to.sock", and
// SKIPPER_BROWSER_EXECUTABLE, the chromium to start.
import { spawn, execFileSync } from "node:child_process";
import { connect, createServer } from "node:net";

const routes = (process.env.SKIPPER_BROWSER_FORWARD ?? "")
  .split(",")
  .filter(Boolean)
  .map((pair) => {
    const [port, socket] = pair.split("=");
    return { port: Number(port), socket };
  });
const executable = process.env.SKIPPER_BROWSER_EXECUTABLE;
if (!executable || routes.some((r) => !Number.isInteger(r.port) || !r.socket)) {
  console.error("browser-netns: SKIPPER_BROWSER_EXECUTABLE and SKIPPER_BROWSER_FORWARD=port=socket,… are needed");
  process.exit(2);
}

execFileSync("ip", ["link", "set", "lo", "up"]);
await Promise.all(
  routes.map(
    ({ port, socket }) =>
      new Promise((resolve, reject) => {
        const server = createServer((inside) => {
          const outside = connect(socket);
          inside.pipe(outside).pipe(inside);
          inside.on("error", () => outside.destroy());
          outside.on("error", () => inside.destroy());
        });
        server.on("error", reject);
        server.listen(port, "127.0.0.1", () => resolve(undefined));
      }),
  ),
);

// Playwright talks to chromium over descriptors 3 and 4 (--remote-debugging-pipe): pass them on.
const browser = spawn(executable, process.argv.slice(2), { stdio: [0, 1, 2, 3, 4] });
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(signal, () => browser.kill(signal));
browser.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
