// The actors a process can run, by name: the one entry point into actors/ for the launcher
// (`rollstream actor <name>`), so cli/ never reaches into an actor's folder. Loaded lazily: a process
// pays for the model code only when its actor needs it.
import type { ActorClass } from "./runtime/actor.js";

export const ACTORS: Record<string, () => Promise<ActorClass>> = {
  orchestrator: async () => (await import("./orchestrator/orchestrator.js")).OrchestratorActor,
  inference: async () => (await import("./inference/inference.js")).InferenceActor,
  reward: async () => (await import("./reward/reward.js")).RewardActor,
  learner: async () => (await import("./learner/learner.js")).LearnerActor,
  checkpoint: async () => (await import("./checkpoint/checkpoint.js")).CheckpointActor,
  evaluator: async () => (await import("./evaluator/evaluator.js")).EvaluatorActor,
  sandbox: async () => (await import("../sandbox/actor.js")).SandboxActor,
};
