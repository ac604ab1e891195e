// Semantic checks of a task against the run it claims to belong to, made before any work: the schema says
// groupSize is a positive integer, this says it is the run's rl.groupSize; likewise the sampling limits, the
// environment and example, and the step. Every task of a run comes from its orchestrator, which fills
// groupSize and sampling from the run config (refills and replacements too), so a task outside these limits
// is a producer bug or an attack, never work to do: one with groupSize 1000000 used to hold an inference
// actor for 24 minutes before it crashed, and was then redelivered. A violation is a PoisonMessageError whose
// text starts with "task: " and names the field and the limit, so the consumer dead-letters it at once.
import { PoisonMessageError } from "./dead-letter.js";
import type { Task } from "./messages.js";

export interface TaskLimits {
  run: string;
  /** rl.groupSize: every task of the run asks for exactly this many completions. */
  groupSize: number;
  /** rl.sampling.maxTokens, the most tokens one model turn may ask for. */
  maxTokens: number;
  /** The highest temperature a task may ask for. */
  maxTemperature: number;
  /** topK past the vocabulary means nothing: the model's vocabulary size. */
  vocabSize: number;
  /** rl.steps: the orchestrator dispatches no task for a step at or past it. */
  steps: number;
  /** The run's environments by key: the id each resolved to and its train split's size (Infinity: endless). */
  envs: ReadonlyMap<string, { id: string; trainSize: number }>;
}

/** A task asks for no more stop strings than this, each no longer than MAX_STOP_CHARS. */
export const MAX_STOP_STRINGS = 16;
export const MAX_STOP_CHARS = 256;

function reject(message: string): never {
  throw new PoisonMessageError(`task: ${message}`);
}

/** Throws a PoisonMessageError ("task: <task id> <field> ...") naming the first limit the task breaks. */
export function checkTask(task: Task, limits: TaskLimits): void {
  const what = `task ${task.taskId}`;
  if (task.run !== limits.run) reject(`${what} belongs to run ${task.run}, not ${limits.run}`);
  const env = limits.envs.get(task.envKey);
  if (!env) reject(`${what} has envKey ${JSON.stringify(task.envKey)}, which is not an environment of this run (${[...limits.envs.keys()].join(", ")})`);
  if (env.id !== task.env) reject(`${what} has env ${task.env}, but envKey ${task.envKey} resolves to ${env.id} in this run`);
  if (task.groupSize !== limits.groupSize) reject(`${what} has groupSize ${task.groupSize}, but the run's rl.groupSize is ${limits.groupSize}`);
  if (Number.isFinite(env.trainSize) && task.exampleIndex >= env.trainSize) {
    reject(`${what} has exampleIndex ${task.exampleIndex}, outside ${task.envKey}'s train split [0, ${env.trainSize})`);
  }
  if (task.step >= limits.steps) reject(`${what} has step ${task.step}, but the run's rl.steps is ${limits.steps} (steps 0..${limits.steps - 1})`);
  checkSampling(task.sampling, limits, what);
}

function checkSampling(s: Task["sampling"], limits: TaskLimits, what: string): void {
  // The config's maxTokens is the ceiling. The model's context needs no bound of its own: the engine stops a
  // turn when the context is full, and a config whose maxTokens is larger than the context is legal.
  if (s.maxTokens > limits.maxTokens) reject(`${what} has sampling.maxTokens ${s.maxTokens}, above the run's rl.sampling.maxTokens ${limits.maxTokens}`);
  if (!(Number.isFinite(s.temperature) && s.temperature <= limits.maxTemperature)) {
    reject(`${what} has sampling.temperature ${s.temperature}, outside [0, ${limits.maxTemperature}]`);
  }
  if (s.topK > limits.vocabSize) reject(`${what} has sampling.topK ${s.topK}, above the model's vocabulary of ${limits.vocabSize}`);
  const stop = s.stop ?? [];
  if (stop.length > MAX_STOP_STRINGS) reject(`${what} has ${stop.length} sampling.stop strings, more than ${MAX_STOP_STRINGS}`);
  const long = stop.findIndex((x) => x.length > MAX_STOP_CHARS || x.length === 0);
  if (long >= 0) reject(`${what} has sampling.stop[${long}] of ${stop[long]!.length} characters, outside [1, ${MAX_STOP_CHARS}]`);
}
