// The feedback channels of a run (streams/feedback.ts): rs.<run>.groups, rs.<run>.steps and rs.<run>.replays,
// each with its schema, headers and msg-id rule. Their readers copy a value that does not decode to the
// dead-letter subject with the reason (pass `deadLetterAs`) and go on.
import { GroupOutcomeSchema, ReplayRecordSchema, StepRecordSchema, type StepRecord } from "../feedback.js";
import type { Wire } from "../wire.js";
import { MsgpackChannel } from "./msgpack-channel.js";

/** One outcome per group; msg-id `group:<task id>`, so a group scored again after a redelivery counts once. */
export function groupChannel(wire: Wire) {
  const n = wire.names;
  return new MsgpackChannel(wire, {
    subject: n.subjects.groups,
    stream: n.streams.events,
    schema: GroupOutcomeSchema,
    what: "group outcome",
    kind: "group",
    headers: (g) => ({ step: g.step, env: g.env, policyVersion: g.policyVersionMin, rows: g.rows }),
    msgId: (g) => `group:${g.taskId}`,
  });
}
export type GroupChannel = ReturnType<typeof groupChannel>;

/**
 * One record per learner step; msg-id `step:<step>:<time>`: a publish of one record retried after a lost ack is
 * stored once, while a step recomputed by a restored learner is a record of its own (readers take the last).
 */
export function stepChannel(wire: Wire) {
  const n = wire.names;
  return new MsgpackChannel(wire, {
    subject: n.subjects.steps,
    stream: n.streams.events,
    schema: StepRecordSchema,
    what: "step record",
    kind: "step",
    headers: (s) => ({ step: s.step, rows: s.rows.trained, tokens: s.tokens }),
    msgId: (s) => `step:${s.step}:${s.time}`,
  });
}
export type StepChannel = ReturnType<typeof stepChannel>;

/** One record per replayed step, one session per `replay` invocation. */
export function replayChannel(wire: Wire) {
  const n = wire.names;
  return new MsgpackChannel(wire, {
    subject: n.subjects.replays,
    stream: n.streams.events,
    schema: ReplayRecordSchema,
    what: "replay record",
    kind: "replay",
    headers: (r) => ({ step: r.step }),
    msgId: (r) => `replay:${r.session}:${r.step}`,
  });
}
export type ReplayChannel = ReturnType<typeof replayChannel>;

/**
 * Every step record stored so far, by step; the last record of a step wins (a step recomputed after a restore
 * is recorded again). Records that do not decode are passed over (and dead-lettered with `deadLetterAs`).
 */
export async function readStepRecords(steps: StepChannel, o: { deadLetterAs?: string; firstWaitMs?: number } = {}): Promise<Map<number, StepRecord>> {
  const out = new Map<number, StepRecord>();
  const reader = steps.reader(1, o.deadLetterAs !== undefined ? { deadLetterAs: o.deadLetterAs } : {});
  try {
    // The first read creates the consumer; then an empty wait means everything stored has been read.
    for (let m = await reader.next(o.firstWaitMs ?? 3000); m !== null; m = await reader.next(500)) if ("value" in m) out.set(m.value.step, m.value);
  } finally {
    await reader.close();
  }
  return out;
}
