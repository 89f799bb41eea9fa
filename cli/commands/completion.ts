// `skipper completion bash|zsh`: the completion script for a shell (completion.ts).
import type { Command } from "commander";
import { bashCompletion, zshCompletion } from "../completion.js";
import { CliError } from "../errors.js";
import type { CommandContext } from "../command-context.js";

export function registerCompletion(program: Command, ctx: CommandContext): void {
  program
    .command("completion")
    .argument("<shell>", "bash or zsh")
    .description("print the shell completion script")
    .addHelpText(
      "after",
      `
Examples:
  $ source <(skipper completion bash)                       # this shell
  $ skipper completion bash > /etc/bash_completion.d/skipper
  $ echo 'source <(skipper completion zsh)' >> ~/.zshrc`,
    )
    .action((shell: string) => {
      if (shell === "bash") ctx.io.out(bashCompletion(program));
      else if (shell === "zsh") ctx.io.out(zshCompletion(program));
      else throw new CliError(`no completion for ${JSON.stringify(shell)}`, { hint: "bash or zsh" });
    });
}
