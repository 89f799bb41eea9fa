// What every command gets (program.ts makes it): its output, the global options, the clients,
// and its exit code.
import type { Clients, GlobalOptions } from "./connection.js";
import type { Io } from "./io.js";

export interface CommandContext {
  io: Io;
  globals(): GlobalOptions;
  /** Clients for the controller the flags, environment and context name (made on first use). */
  clients(): Clients;
  /** Set by a command that ends with something other than 0 without an error (2: blocked). */
  exitCode: number;
}
