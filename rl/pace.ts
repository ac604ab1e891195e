// The dispatch gate and rl.staleness pace, as the orchestrator applies them. Tasks for RL step n go out only
// while n - learnerStep <= maxAsyncLevel. Under pace also while n - learnerStep <= maxOffPolicySteps, and never
// for a step past the deadline of a task still in flight: a task dispatched at learner version v must be
// trained by version v + maxOffPolicySteps, so holding later steps back makes the learner wait for the
// straggler instead of training past it and dropping it (until the learner is past the deadline anyway).

/** The asynchrony bound: a task for `step` may go out while the learner is at `learnerStep`. */
export function withinAsyncLevel(step: number, learnerStep: number, maxAsyncLevel: number): boolean {
  return step - learnerStep <= maxAsyncLevel;
}

/** The last learner version at which the samples of a task dispatched at `dispatchVersion` may be trained. */
export function paceDeadline(dispatchVersion: number, maxOffPolicySteps: number): number {
  return dispatchVersion + maxOffPolicySteps;
}

/** A deadline the learner is already past binds nothing: its samples are lost to the bound (and counted by the learner). */
export function deadlineExpired(deadline: number, learnerStep: number): boolean {
  return deadline < learnerStep;
}

/** pace: whether a task for `step` may go out, given the deadlines of the tasks still in flight. */
export function paceAllows(step: number, learnerStep: number, maxOffPolicySteps: number, deadlines: Iterable<number>): boolean {
  if (step - learnerStep > maxOffPolicySteps) return false;
  for (const d of deadlines) if (!deadlineExpired(d, learnerStep) && step > d) return false;
  return true;
}
