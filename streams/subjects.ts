// Every subject, stream, bucket and consumer name of a run, in one place (DESIGN §3).
// One run = one prefix `rs.<run>`, so runs never see each other's messages.

const RUN_NAME = /^[A-Za-z0-9_-]{1,64}$/;

export function assertRunName(run: string): void {
  if (!RUN_NAME.test(run)) {
    throw new Error(`invalid run name ${JSON.stringify(run)}: use 1-64 characters from [A-Za-z0-9_-] (it becomes part of NATS subjects and stream names)`);
  }
}

export interface RunNames {
  run: string;
  prefix: string;
  subjects: {
    tasks: string;
    rolloutsRaw: string;
    rolloutsScored: string;
    weights: string;
    checkpoints: string;
    /** One GroupOutcome per scored or left-out group (streams/feedback.ts). */
    groups: string;
    /** One StepRecord per learner step. */
    steps: string;
    /** One ReplayRecord per replayed step. */
    replays: string;
    /** metrics.<actor>: display only */
    metrics(actor: string): string;
    metricsAll: string;
    dlq: string;
    /** held-out evaluation results and samples */
    eval: string;
    /** request/reply: the checkpoint actor restores a saved state into the object store */
    checkpointRestore: string;
  };
  streams: { tasks: string; rollouts: string; events: string };
  consumers: { inference: string; reward: string; checkpoint: string };
  kvBucket: string;
  objectBucket: string;
  /** Payloads too large for one message (streams/large-payload.ts). */
  blobBucket: string;
  /** Work started and never finished, per message (streams/attempt-ledger.ts). */
  attemptsBucket: string;
  /** Each actor instance's heartbeat (streams/health.ts). */
  healthBucket: string;
}

export function runNames(run: string): RunNames {
  assertRunName(run);
  const prefix = `rs.${run}`;
  const upper = run.toUpperCase().replace(/-/g, "_");
  return {
    run,
    prefix,
    subjects: {
      tasks: `${prefix}.tasks`,
      rolloutsRaw: `${prefix}.rollouts.raw`,
      rolloutsScored: `${prefix}.rollouts.scored`,
      weights: `${prefix}.weights`,
      checkpoints: `${prefix}.checkpoints`,
      groups: `${prefix}.groups`,
      steps: `${prefix}.steps`,
      replays: `${prefix}.replays`,
      metrics: (actor: string) => `${prefix}.metrics.${actor}`,
      metricsAll: `${prefix}.metrics.>`,
      dlq: `${prefix}.dlq`,
      eval: `${prefix}.eval`,
      checkpointRestore: `${prefix}.checkpoint.restore`,
    },
    streams: { tasks: `RS_${upper}_TASKS`, rollouts: `RS_${upper}_ROLLOUTS`, events: `RS_${upper}_EVENTS` },
    consumers: { inference: "inference", reward: "reward", checkpoint: "checkpoint" },
    kvBucket: `rs-${run}-state`,
    objectBucket: `rs-${run}-weights`,
    blobBucket: `rs-${run}-blobs`,
    attemptsBucket: `rs-${run}-attempts`,
    healthBucket: `rs-${run}-health`,
  };
}

export function weightsObjectName(version: number): string {
  return `v${version}`;
}

export function stateObjectName(step: number): string {
  return `state-${step}`;
}
