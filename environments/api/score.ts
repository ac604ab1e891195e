export interface ScoreResult {
  /** Σ weight × component. */
  reward: number;
  /** Raw value of every weighted reward function, by name. */
  components: Record<string, number>;
  /** Zero-weight functions and numeric state.metrics, by name. */
  metrics: Record<string, number>;
  /** Reward functions that threw or timed out (they scored 0), unparseable output, rollout errors. */
  errors: string[];
}
