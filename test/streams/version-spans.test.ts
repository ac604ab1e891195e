// Per-token versions on the raw rollout (msgpack): what reward reads is checked like the Arrow row, and a
// rollout whose spans contradict its tokens or version range does not decode (it is dead-lettered).
import { test } from "node:test";
import assert from "node:assert/strict";
import { RawRolloutSchema } from "../../streams/messages.js";
import { validRollout } from "../helpers/rollout-fixtures.js";

const parse = (edit: Parameters<typeof validRollout>[0]) => RawRolloutSchema.safeParse(validRollout(edit));

test("raw rollouts: spans that fit are accepted, absent spans default to none", () => {
  assert.ok(parse({}).success);
  const two = parse({
    policyVersionMax: 1,
    versionSpans: [
      { version: 0, start: 0, end: 1 },
      { version: 1, start: 1, end: 2 },
    ],
  });
  assert.ok(two.success);
  const { versionSpans: _, ...old } = validRollout();
  const parsed = RawRolloutSchema.parse(old);
  assert.deepEqual(parsed.versionSpans, []);
});

test("raw rollouts: spans that contradict the tokens or the range do not decode, with the reason", () => {
  const cases: Array<[Parameters<typeof validRollout>[0], RegExp]> = [
    [{ versionSpans: [{ version: 0, start: 0, end: 1 }] }, /sampled token 1 is in no version span/],
    [{ versionSpans: [{ version: 0, start: 0, end: 3 }] }, /passes the completion's 2 tokens/],
    [{ versionSpans: [{ version: 2, start: 0, end: 2 }] }, /outside policy versions 0..0/],
    [{ policyVersionMax: 1 }, /spans cover versions 0..0, but the row says 0..1/],
  ];
  for (const [edit, why] of cases) {
    const r = parse(edit);
    assert.equal(r.success, false, JSON.stringify(edit));
    assert.match(r.error!.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "), why);
  }
});
