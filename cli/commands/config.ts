// `rollstream config check <file>` lists every problem of a run config; `config show <file>` prints it
// with every default filled in.
import type { Command } from "commander";
import { stringify } from "yaml";
import { loadRunConfig } from "../../actors/runtime/config.js";
import { checkConfigFile, describeCheck } from "../../actors/runtime/config-check.js";

export function registerConfigCommand(program: Command): void {
  const cmd = program.command("config").description("validate a run config or print it with defaults");
  cmd
    .command("check <file>")
    .description("every problem at once: schema, unknown keys, environments and their args")
    .action(async (file: string) => {
      const checked = await checkConfigFile(file);
      if (checked.problems.length === 0) console.log(`${file}: ok`);
      else {
        process.stderr.write(`${describeCheck(file, checked)}\n`);
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
