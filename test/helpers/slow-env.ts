// Test environments whose groups are scored after a delay (a rubric that sleeps), as a long rollout of a hard
// problem reaches the learner late: `writeTimedEnv(dir, "slow", 1500)` writes package slow@1.0.0. The reward is
// a hash of the reply, so groups carry signal. Written as package folders for ROLLSTREAM_ENV_PATH.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const apiUrl = pathToFileURL(resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "environments", "api", "index.js")).href;

export function writeTimedEnv(dir: string, name: string, delayMs: number): string {
  const folder = join(dir, "envs", name);
  mkdirSync(folder, { recursive: true });
  writeFileSync(join(folder, "package.json"), JSON.stringify({ name, version: "1.0.0", type: "module", main: "index.js" }));
  writeFileSync(
    join(folder, "index.js"),
    `import { buildPrompt, createEnvironment, generatorDataset, Rubric } from ${JSON.stringify(apiUrl)};
export function loadEnvironment() {
  const rubric = new Rubric().reward("timed", async ({ completion }) => {
    await new Promise((r) => setTimeout(r, ${delayMs}));
    let h = 7;
    for (const ch of completion.map((m) => m.content).join("")) h = (h * 31 + ch.codePointAt(0)) % 1000003;
    return (h % 1000) / 1000;
  });
  return createEnvironment({
    name: ${JSON.stringify(name)},
    version: "1.0.0",
    dataset: (split) => generatorDataset(split === "train" ? Number.POSITIVE_INFINITY : 8, (i) => ({ id: split + "-" + i, prompt: buildPrompt("n " + (i % 9)), answer: "", info: {} })),
    rubric,
  });
}
`,
  );
  return join(dir, "envs");
}
