// Group outcomes as the reward actor would publish them, for tests that drive the orchestrator directly.
import type { GroupOutcome, Task } from "../../streams/index.js";

export function outcomeOf(task: Task, o: Partial<GroupOutcome> = {}): GroupOutcome {
  return {
    run: task.run,
    taskId: task.taskId,
    envKey: task.envKey,
    env: task.env,
    step: task.step,
    exampleIndex: task.exampleIndex,
    round: task.round ?? 0,
    outcome: "scored",
    rewards: Array.from({ length: task.groupSize }, () => 0),
    passRate: 0,
    rows: task.groupSize,
    overlong: 0,
    policyVersionMin: 0,
    policyVersionMax: 0,
    scoreMs: 1,
    ...o,
  };
}
