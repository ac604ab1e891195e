// Hands `rollstream eval` (environments/) the one thing it cannot build itself: a client over our model.
import type { Command } from "commander";
import { registerEvalCommand } from "./eval.js";
import { makeCheckpointClient } from "../checkpoint-client.js";

export function registerEval(program: Command): void {
  registerEvalCommand(program, { makeCheckpointClient });
}
