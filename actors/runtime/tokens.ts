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
  /** GroupChannel: rs.<run>.groups, the reward actor's outcome of each group (the orchestrator's refills, pools, pacing). */
  Groups: Symbol("GroupChannel"),
  /** StepChannel: rs.<run>.steps, the learner's record of each step (a restarted learner follows its earlier life's). */
  Steps: Symbol("StepChannel"),
  /** DeadLetterChannel: rs.<run>.dlq, for what an actor leaves out of a message it otherwise handles. */
  DeadLetters: Symbol("DeadLetterChannel"),
  /** HealthBoard: every actor instance's heartbeat in the run's health bucket (who is running). */
  HealthBoard: Symbol("HealthBoard"),
  /** CodeSandbox: the sandbox service client environments run code through. */
  Sandbox: Symbol("CodeSandbox"),
} as const;
