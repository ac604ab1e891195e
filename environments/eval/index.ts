export { runEval, type RunEvalOptions, type EvalReport, type EvalProgress } from "./run-eval.js";
export { summarize, formatSummary, type EvalSummary } from "./summary.js";
export { passAtK, reportedKs } from "./pass-at-k.js";
export type { EvalRecord, EvalMetadata, EvalIdentity } from "./records.js";
export { ResultsStore, type PendingRollout } from "./results-store.js";
