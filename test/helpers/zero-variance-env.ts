// A test environment whose groups are of known kinds, for the zero-variance filter: prompt i % 6 == 0 is
// all-wrong (rewards in [0, 1e-4) by a hash of the reply: within the filter's tolerance, yet a spread the
// group std would blow up to ±1 advantages), i % 6 == 1 all-right (1), and the rest score a hash of the reply in
// [0, 1) (informative but for a one-in-a-million tie). `allWrong: true` makes every prompt all-wrong. Written
// as a package folder for ROLLSTREAM_ENV_PATH.
import { envApiUrl as apiUrl, writeEnvPackage } from "./env-package.js";

/** The all-wrong prompts' reward noise: inside a filter tolerance of 1e-3, far above the 1e-6 std floor of normalisation. */
export const ZERO_VARIANCE_NOISE = 1e-4;

export function writeZeroVarianceEnv(dir: string): string {
  return writeEnvPackage(
    dir,
    "zerovar",
    `import { buildPrompt, createEnvironment, generatorDataset, Rubric } from ${JSON.stringify(apiUrl)};
export function loadEnvironment(args = {}) {
  const hash = (completion) => {
    let h = 7;
    for (const ch of completion.map((m) => m.content).join("")) h = (h * 31 + ch.codePointAt(0)) % 1000003;
    return h;
  };
  const rubric = new Rubric().reward("outcome", ({ completion, info }) => {
    const h = hash(completion);
    if (info.kind === "wrong") return ((h % 1000) / 1000) * ${ZERO_VARIANCE_NOISE};
    if (info.kind === "right") return 1;
    return (h % 1000) / 1000;
  });
  const kindOf = (i) => (args.allWrong || i % 6 === 0 ? "wrong" : i % 6 === 1 ? "right" : "graded");
  return createEnvironment({
    name: "zerovar",
    version: "1.0.0",
    dataset: (split) =>
      generatorDataset(split === "train" ? Number.POSITIVE_INFINITY : 8, (i) => ({ id: split + "-" + i, prompt: buildPrompt("q " + (i % 97)), answer: "", info: { kind: kindOf(i) } })),
    rubric,
  });
}
`,
  );
}
