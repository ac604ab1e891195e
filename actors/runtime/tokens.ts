// Injection tokens. Every injected constructor parameter names its token with @inject(token): neither
// our TypeScript pin nor tsx emit reliable parameter-type metadata, so we never rely on it. Each token
// is registered by lifecycle.ts (bound to the process's NATS connection) and injected by at least one
// actor; a test resolves an actor with a channel bound to its own nats-server the same way.
export const Tokens = {
  Context: Symbol("ActorContext"),
  /** RunState: the run's typed KV bucket. */
  RunState: Symbol("RunState"),
  /** TaskChannel: rs.<run>.tasks. */
  Tasks: Symbol("TaskChannel"),
  /** RawRolloutChannel: rs.<run>.rollouts.raw. */
  RawRollouts: Symbol("RawRolloutChannel"),
  /** ScoredChannel: rs.<run>.rollouts.scored (Arrow). */
  Scored: Symbol("ScoredChannel"),
  /** WeightsChannel: weight objects + rs.<run>.weights. */
  Weights: Symbol("WeightsChannel"),
  /** CheckpointChannel: state objects + rs.<run>.checkpoints. */
  Checkpoints: Symbol("CheckpointChannel"),
  /** RestoreChannel: rs.<run>.checkpoint.restore request/reply. */
  Restore: Symbol("RestoreChannel"),
  /** EvalChannel: rs.<run>.eval, held-out results and samples. */
  Eval: Symbol("EvalChannel"),
  /** MetricsChannel of the reward actor: rs.<run>.metrics.reward, whose group events the orchestrator reads (rl.filter). */
  RewardEvents: Symbol("RewardEvents"),
  /** The learner's own metrics events: a restarted learner under rl.staleness pace follows its earlier life's steps. */
  LearnerEvents: Symbol("LearnerEvents"),
  /** DeadLetterChannel: rs.<run>.dlq, for what an actor leaves out of a message it otherwise handles. */
  DeadLetters: Symbol("DeadLetterChannel"),
  /** CodeSandbox: the sandbox service client environments run code through. */
  Sandbox: Symbol("CodeSandbox"),
} as const;
