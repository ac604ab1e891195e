// A multi-turn environment written as a third party would, into a temp folder found through
// ROLLSTREAM_ENV_PATH: the env answers every model turn, keeps what it saw in `state`, and scores from
// that state (so a run that lost `state` on the wire would score differently than `eval`).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { envApiUrl as apiUrl } from "./env-package.js";

export function writeMultiTurnEnv(dir: string): string {
  const folder = join(dir, "echo-turns");
  mkdirSync(folder, { recursive: true });
  writeFileSync(
    join(folder, "package.json"),
    JSON.stringify({ name: "echo-turns", version: "2.1.0", type: "module", main: "index.js", keywords: ["rollstream-environment"] }),
  );
  writeFileSync(
    join(folder, "index.js"),
    `
import { buildPrompt, createEnvironment, generatorDataset, multiTurnRollout, Rubric } from ${JSON.stringify(apiUrl)};
export function loadEnvironment() {
  const rubric = new Rubric()
    .reward("turns", ({ state }) => Math.min(1, (state.seen?.length ?? 0) / 3))
    .reward("short", ({ state }) => (state.seen ?? []).every((s) => s.length < 6), 0.5)
    .metric("seen_chars", ({ state }) => (state.seen ?? []).reduce((n, s) => n + s.length, 0));
  return createEnvironment({
    name: "echo-turns",
    version: "2.1.0",
    dataset: (split) => generatorDataset(split === "train" ? Number.POSITIVE_INFINITY : 8, (i) => ({
      id: split + "-" + i, prompt: buildPrompt("say " + (i % 7)), answer: String(i % 7), info: {},
    })),
    rubric,
    rollout: (ctx, row) => multiTurnRollout(ctx, row, {
      maxTurns: 3,
      setupState: () => ({ seen: [], metrics: { env_turns: 0 } }),
      envResponse: (messages, state) => {
        const last = messages[messages.length - 1].content;
        state.seen.push(last.slice(0, 8));
        state.metrics.env_turns += 1;
        return [{ role: "user", content: "again" }];
      },
    }),
  });
}
`,
  );
  return dir;
}
