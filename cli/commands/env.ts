// `rollstream env list` and `rollstream env init <name>`.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { packageRoot } from "../../kernels/native.js";
import type { Command } from "commander";
import { listEnvironments } from "../../environments/registry.js";
import { scaffoldEnvironment, scaffoldEnvironmentPackage } from "../../environments/scaffold.js";

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
    .description("scaffold environments/<name> and its test in this checkout, or with --package a standalone npm package")
    .option("--root <dir>", "project root", process.cwd())
    .option("--package [dir]", "write a standalone package (imports only rollstream/environments) into dir (default: ./<name>)")
    .action((name: string, opts: { root: string; package?: string | boolean }) => {
      if (opts.package !== undefined) {
        const dir = typeof opts.package === "string" ? opts.package : name;
        const files = scaffoldEnvironmentPackage(name, { dir, rollstreamVersion: ownVersion() });
        process.stdout.write(
          `created ${files.map((f) => join(dir, f)).join(", ")}\n` +
            `next: cd ${dir} && npm install --no-save <path to rollstream> && npm install && npm test\n` +
            `then from your rollstream project: npm install ${dir} (or put its parent folder on ROLLSTREAM_ENV_PATH) and rollstream eval ${name} -n 5 --checkpoint <dir>\n`,
        );
        return;
      }
      const files = scaffoldEnvironment(name, { root: opts.root });
      process.stdout.write(`created ${files.join(", ")}\nbuild (npm run build), then: rollstream eval ${name} -n 5 --checkpoint <dir>\n`);
    });
}

/** This rollstream's version: the peer dependency range a new package asks for. */
function ownVersion(): string {
  return (JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8")) as { version: string }).version;
}
