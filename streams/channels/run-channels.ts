// All channels of one run over one Wire. Actors get the ones they use injected one by one
// (actors/runtime/tokens.ts); tools build this and pick what they read.
import type { Wire } from "../wire.js";
import { CheckpointChannel, RestoreChannel } from "./checkpoint-channels.js";
import {
  evalChannel,
  metricsChannel,
  rawRolloutChannel,
  taskChannel,
  type EvalChannel,
  type MetricsChannel,
  type RawRolloutChannel,
  type TaskChannel,
} from "./control-channels.js";
import { DeadLetterChannel } from "./dead-letter-channel.js";
import { groupChannel, replayChannel, stepChannel, type GroupChannel, type ReplayChannel, type StepChannel } from "./feedback-channels.js";
import { ScoredChannel } from "./scored-channel.js";
import { WeightsChannel } from "./weights-channel.js";

export class RunChannels {
  readonly tasks: TaskChannel;
  readonly rawRollouts: RawRolloutChannel;
  readonly scored: ScoredChannel;
  readonly weights: WeightsChannel;
  readonly checkpoints: CheckpointChannel;
  readonly restore: RestoreChannel;
  readonly eval: EvalChannel;
  readonly deadLetters: DeadLetterChannel;
  readonly groups: GroupChannel;
  readonly steps: StepChannel;
  readonly replays: ReplayChannel;

  constructor(readonly wire: Wire) {
    this.tasks = taskChannel(wire);
    this.rawRollouts = rawRolloutChannel(wire);
    this.scored = new ScoredChannel(wire);
    this.weights = new WeightsChannel(wire);
    this.checkpoints = new CheckpointChannel(wire);
    this.restore = new RestoreChannel(wire);
    this.eval = evalChannel(wire);
    this.deadLetters = new DeadLetterChannel(wire);
    this.groups = groupChannel(wire);
    this.steps = stepChannel(wire);
    this.replays = replayChannel(wire);
  }

  /** Display only: nothing decides anything from a metrics event. */
  metrics(actor: string): MetricsChannel {
    return metricsChannel(this.wire, actor);
  }
}
