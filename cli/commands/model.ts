// `rollstream model info <folder>`: what rollstream recognises in a Hugging Face model folder (kernels/model-info.ts),
// or exactly which config key, tensor or file it cannot load (exit 2).
import type { Command } from "commander";
import { describeModelFolder, formatModelInfo } from "../../kernels/model-info.js";

export function registerModelCommand(program: Command): void {
  const cmd = program.command("model").description("inspect Hugging Face model folders");
  cmd
    .command("info <folder>")
    .description("architecture, parameters, experts, LoRA, dtype, tokenizer and chat template; or what does not load")
    .action((folder: string) => {
      const info = describeModelFolder(folder);
      const text = formatModelInfo(folder, info);
      if (info.problems.length === 0) console.log(text);
      else {
        process.stderr.write(`${text}\n`);
        process.exitCode = 2;
      }
    });
}
