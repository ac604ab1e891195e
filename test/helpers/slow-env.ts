// Test environments whose groups are scored after a delay (a rubric that sleeps), as a long rollout of a hard
// problem reaches the learner late: `writeTimedEnv(dir, "slow", 1500)` writes package slow@1.0.0. The reward is
// a hash of the reply, so groups carry signal. Written as package folders for ROLLSTREAM_ENV_PATH.
import { envApiUrl as apiUrl, writeEnvPackage } from "./env-package.js";

export function writeTimedEnv(dir: string, name: string, delayMs: number): string {
  return writeEnvPackage(
    dir,
    name,
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
}
