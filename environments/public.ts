// rollstream's public API for environments: what `import ... from "rollstream/environments"` gives an
// environment package (package.json `exports`). Everything an environment is made of — messages, datasets,
// parsers, the rubric, single-turn, multi-turn and tool rollouts, tools, the sandbox interface — plus the
// helpers the built-in environments use: validated args, seeded per-row randomness, train/eval partitions.
// Test doubles (a byte tokenizer with a chat template, a scripted model) are "rollstream/environments/testing".
export * from "./api/index.js";
export { parseEnvArgs } from "./util/args.js";
export { hashOf, isEvalTask, Rng, rngFor } from "./util/rng.js";
// Held-out splits that follow train's distribution: class shares apportioned, then interleaved.
export { apportion, interleave, stratifiedSplit, type StratifiedSplitOptions } from "./util/stratify.js";
// Exact rational arithmetic for answers such as 3/4 (the logic and tool environments check with it).
export { formatRational, parseRationalExpr, rat, ratEquals, type ParsedExpr, type Rational } from "./util/rational-expr.js";
// A verifier that can hang or blow up runs in a worker with a time limit (the math environment's).
export * from "./util/timed-worker.js";
// The zod that parseEnvArgs validates with: an environment's args schema must come from the same copy.
export { z } from "zod";
