// The workloads of `rollstream bench inference`: tasks as groups of rollouts (prompt, sampling, environment replies
// between model turns), and the runner that plays them against any ModelClient, IN_FLIGHT tasks at a time.
import type { ModelClient, SamplingArgs } from "../environments/api/index.js";
import { ByteTokenizer } from "../kernels/tokenizer.js";

const tok = new ByteTokenizer();
export const GROUP = 8;
const IN_FLIGHT = 8;

export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface TaskSpec {
  index: number;
  prompt: number[];
  args: SamplingArgs;
  /** Per rollout: the environment's reply after each model turn but the last (its length is the turn count - 1). */
  replies: number[][][];
}

/** The demo's own rollouts (examples/demo.yaml): 2-digit additions, single turn, 24 tokens, groups of 8. */
export function demoTasks(n: number, seed: number): TaskSpec[] {
  const r = rng(seed);
  const num = () => 10 + Math.floor(r() * 90);
  return Array.from({ length: n }, (_, index) => ({
    index,
    prompt: tok.applyChatTemplate([{ role: "user", content: `${num()}+${num()}` }], { addGenerationPrompt: true }),
    args: { temperature: 1, topP: 1, topK: 0, maxTokens: 24 },
    replies: Array.from({ length: GROUP }, () => []),
  }));
}

/** Runs every task's group of rollouts, IN_FLIGHT tasks at a time; each rollout's seeds are its own. */
export async function runTasks(
  tasks: TaskSpec[],
  clientOf: (seedBase: number) => ModelClient,
): Promise<{ seconds: number; generated: number; outputs: string[] }> {
  const outputs: string[] = new Array(tasks.length * GROUP);
  let generated = 0;
  let next = 0;
  const rollout = async (t: TaskSpec, g: number) => {
    const client = clientOf(t.index * 1000 + g * 16);
    let convo = t.prompt;
    const parts: number[] = [];
    for (let turn = 0; ; turn++) {
      const out = await client.generate(convo, t.args);
      generated += out.tokenIds.length;
      parts.push(...out.tokenIds, -1);
      const reply = t.replies[g]![turn];
      if (!reply) break;
      convo = [...convo, ...out.tokenIds, ...reply];
    }
    outputs[t.index * GROUP + g] = parts.join(",");
  };
  const worker = async () => {
    while (next < tasks.length) {
      const t = tasks[next++]!;
      await Promise.all(Array.from({ length: GROUP }, (_, g) => rollout(t, g)));
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return { seconds: (performance.now() - t0) / 1000, generated, outputs };
}
