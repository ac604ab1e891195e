// `rollstream config check <file>` lists every problem of a run config; `config show <file>` prints it
// with every default filled in.
import type { Command } from "commander";
import { stringify } from "yaml";
import { loadRunConfig } from "../../actors/runtime/config.js";

export function registerConfigCommand(program: Command): void {
  const cmd = program.command("config").description("validate a run config or print it with defaults");
  cmd.command("check <file>").action((file: string) => {
    try {
      loadRunConfig(file);
      console.log(`${file}: ok`);
    } catch (e) {
      process.stderr.write(`${(e as Error).message}\n`);
      process.exitCode = 2;
    }
  });
  cmd.command("show <file>").action((file: string) => {
    try {
      process.stdout.write(stringify(loadRunConfig(file)));
    } catch (e) {
      process.stderr.write(`${(e as Error).message}\n`);
      process.exitCode = 2;
    }
  });
}
