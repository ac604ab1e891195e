// `rollstream env list` and `rollstream env init <name>`.
import type { Command } from "commander";
import { listEnvironments } from "../../environments/registry.js";
import { scaffoldEnvironment } from "../../environments/scaffold.js";

export function registerEnvCommands(program: Command): void {
  const env = program.command("env").description("environment modules: list what is installed, scaffold a new one");

  env
    .command("list")
    .description("environments in the project's environments/, ROLLSTREAM_ENV_PATH and node_modules")
    .option("--json", "print JSON")
    .action(async (opts: { json?: boolean }) => {
      const list = await listEnvironments();
      if (opts.json) {
        process.stdout.write(JSON.stringify(list, null, 2) + "\n");
        return;
      }
      if (list.length === 0) {
        process.stdout.write("no environments found\n");
        return;
      }
      const w = Math.max(...list.map((i) => `${i.name}@${i.version}`.length));
      for (const i of list) {
        process.stdout.write(`${`${i.name}@${i.version}`.padEnd(w)}  ${i.source.padEnd(7)}  ${i.description ?? ""}\n`);
      }
    });

  env
    .command("init <name>")
    .description("scaffold environments/<name> (package.json, index.ts) and test/environments/<name>.test.ts")
    .option("--root <dir>", "project root", process.cwd())
    .action((name: string, opts: { root: string }) => {
      const files = scaffoldEnvironment(name, { root: opts.root });
      process.stdout.write(`created ${files.join(", ")}\nbuild (npm run build), then: rollstream eval ${name} -n 5 --checkpoint <dir>\n`);
    });
}
