// A test environment whose reward varies within every group (a hash of the reply), so every step has
// non-zero advantages: the weights move, a loss change has something to act on, reward filters have both
// kinds of group to tell apart. Written as a package folder for ROLLSTREAM_ENV_PATH.
import { envApiUrl as apiUrl, writeEnvPackage } from "./env-package.js";

/** A reward that varies within every group (a hash of the reply), so every step has non-zero advantages for a loss change to act on. */
export function writeSpreadEnv(dir: string): string {
  return writeEnvPackage(
    dir,
    "spread",
    `import { buildPrompt, createEnvironment, generatorDataset, Rubric } from ${JSON.stringify(apiUrl)};
export function loadEnvironment() {
  const rubric = new Rubric().reward("spread", ({ completion }) => {
    let h = 7;
    for (const ch of completion.map((m) => m.content).join("")) h = (h * 31 + ch.codePointAt(0)) % 1000003;
    return (h % 1000) / 1000;
  });
  return createEnvironment({
    name: "spread",
    version: "1.0.0",
    dataset: (split) => generatorDataset(split === "train" ? Number.POSITIVE_INFINITY : 8, (i) => ({ id: split + "-" + i, prompt: buildPrompt("n " + (i % 9)), answer: "", info: {} })),
    rubric,
  });
}
`,
  );
}
