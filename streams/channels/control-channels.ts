// The msgpack channels of a run: tasks, raw rollout groups, metrics and eval results. Each one's
// subject, stream, schema, headers and msg-id rule are stated here once.
import { RawRolloutGroupSchema, TaskSchema, MetricsEventSchema, EvalMessageSchema, type EvalMessage } from "../messages.js";
import type { Wire } from "../wire.js";
import { MsgpackChannel } from "./msgpack-channel.js";

/** One prompt group to roll out. msg-id = task id (`<run>:<epoch>:<index>`): a restarted orchestrator never duplicates one. */
export function taskChannel(wire: Wire) {
  const n = wire.names;
  return new MsgpackChannel(wire, {
    subject: n.subjects.tasks,
    stream: n.streams.tasks,
    durable: n.consumers.inference,
    schema: TaskSchema,
    what: "task",
    kind: "task",
    headers: (t) => ({ step: t.step, env: t.env }),
    msgId: (t) => t.taskId,
  });
}
export type TaskChannel = ReturnType<typeof taskChannel>;

/** A task's group of rollouts as the environment returned them. Long multi-turn groups go via the blob bucket. */
export function rawRolloutChannel(wire: Wire) {
  const n = wire.names;
  return new MsgpackChannel(wire, {
    subject: n.subjects.rolloutsRaw,
    stream: n.streams.rollouts,
    durable: n.consumers.reward,
    schema: RawRolloutGroupSchema,
    what: "raw rollout group",
    kind: "rollouts.raw",
    headers: (g) => ({
      step: g.task.step,
      env: g.task.env,
      policyVersion: Math.min(...g.rollouts.map((r) => r.policyVersionMin)),
      rows: g.rollouts.length,
      tokens: g.rollouts.reduce((s, r) => s + r.completionIds.length, 0),
    }),
    msgId: (g) => `raw:${g.task.taskId}`,
    large: true,
  });
}
export type RawRolloutChannel = ReturnType<typeof rawRolloutChannel>;

/** Metrics events of one actor on rs.<run>.metrics.<actor> (kept in the events stream, no msg-id: each is new). */
export function metricsChannel(wire: Wire, actor: string) {
  const n = wire.names;
  return new MsgpackChannel(wire, {
    subject: n.subjects.metrics(actor),
    stream: n.streams.events,
    schema: MetricsEventSchema,
    what: "metrics event",
    kind: "metrics",
    headers: (e) => ({ step: e.step, actor: e.actor, kind: e.kind }),
  });
}
export type MetricsChannel = ReturnType<typeof metricsChannel>;

function evalMsgId(e: EvalMessage): string {
  // The eval split keeps the ids it always had; another split's messages name it.
  const env = e.split === undefined || e.split === "eval" ? e.env : `${e.env}:${e.split}`;
  return e.kind === "result"
    ? `eval:${e.version}:${env}:result`
    : `eval:${e.version}:${env}:${e.greedy ? "greedy" : "sampled"}:${e.exampleId}:${e.sampleIndex}`;
}

/** Held-out evaluation results and samples on rs.<run>.eval; msg-ids make a re-evaluated version count once. */
export function evalChannel(wire: Wire) {
  const n = wire.names;
  return new MsgpackChannel(wire, {
    subject: n.subjects.eval,
    stream: n.streams.events,
    schema: EvalMessageSchema,
    what: "eval message",
    kind: "eval",
    headers: (e) => ({ policyVersion: e.version, env: e.env, kind: `eval.${e.kind}` }),
    msgId: evalMsgId,
    large: true,
  });
}
export type EvalChannel = ReturnType<typeof evalChannel>;
