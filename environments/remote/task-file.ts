// The tasks of a remote environment, held by rollstream: a verifiers env-server never loads data (the client owns
// the taskset and ships each task's data with its run request: verifiers/v1/serve/server.py@a60a606 `_build_task`,
// prime-rl orchestrator/envs.py@559b447), so a run names a JSON-lines file per split, one task's data per line.
// A row keeps the whole line as info.task (what is sent back to the server), and shows its prompt, system prompt
// and answer the way every other environment's rows do (eval records, SFT targets).
import { readFileSync } from "node:fs";
import { z } from "zod";
import { listDataset, type Dataset, type DatasetRow } from "../api/dataset.js";
import type { ChatMessage } from "../api/messages.js";

const taskLineSchema = z
  .object({
    name: z.string().nullable().optional(),
    prompt: z
      .union([z.string(), z.array(z.object({ role: z.enum(["system", "user", "assistant", "tool"]), content: z.string() }).passthrough())])
      .nullable()
      .optional(),
    system_prompt: z.string().nullable().optional(),
    answer: z.unknown().optional(),
  })
  .passthrough();

/** Rows of a JSON-lines task file; a bad line throws naming the file and line. */
export function taskFileDataset(path: string, split: string): Dataset {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new Error(`tasks file ${path} (${split}) cannot be read: ${(e as Error).message}`);
  }
  const rows: DatasetRow[] = [];
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (e) {
      throw new Error(`tasks file ${path} line ${i + 1} is not JSON: ${(e as Error).message}`);
    }
    const parsed = taskLineSchema.safeParse(value);
    if (!parsed.success) throw new Error(`tasks file ${path} line ${i + 1}: ${parsed.error.issues[0]!.path.join(".")}: ${parsed.error.issues[0]!.message}`);
    rows.push(taskRow(parsed.data, `${split}-${rows.length}`));
  });
  if (rows.length === 0) throw new Error(`tasks file ${path} (${split}) has no tasks`);
  return listDataset(rows);
}

function taskRow(task: z.infer<typeof taskLineSchema>, fallbackId: string): DatasetRow {
  const prompt: ChatMessage[] = [];
  if (task.system_prompt) prompt.push({ role: "system", content: task.system_prompt });
  if (typeof task.prompt === "string") prompt.push({ role: "user", content: task.prompt });
  else if (Array.isArray(task.prompt)) for (const m of task.prompt) prompt.push({ role: m.role, content: m.content });
  if (prompt.length === 0) prompt.push({ role: "user", content: "" });
  return {
    id: task.name ?? fallbackId,
    prompt,
    answer: typeof task.answer === "string" ? task.answer : task.answer === undefined ? "" : JSON.stringify(task.answer),
    info: { task },
  };
}
