// One source of truth for what a rollout says: the rubric scores the text of its messages, the learner
// trains its completion ids, so the two must say the same thing. A raw group whose assistant text gives the
// right answer while its ids give a wrong one would otherwise be trained at a positive advantage.
//
// What is compared, and why exactly this: each model turn's ids are the mask-1 run of completion tokens that
// starts at its turnOffsets entry (groups recorded before turnOffsets existed: each maximal run of mask-1
// tokens is a turn). Every mask-1 token must lie in a turn, so no trained token escapes the check. The turns
// are matched in order, one to one, with the assistant messages of the completion as the rubric sees it
// (completionMessages: the messages after the prompt), so the assistant text any parser reads is covered;
// the prompt's own assistant messages (few-shot) are not model turns. A turn's text must equal
// `decode(ids, { skipSpecial: true })`: the convention of Generation.text (environments/api/model.ts) that
// every model client follows. It drops special tokens — the EOS or end-of-turn token that ends a turn, a
// chat template's markers — which the parser never sees. The one other form the convention allows is a text
// cut before a matched stop string: the decoding must then start with the text and continue with one of the
// task's sampling.stop strings (a stop string an environment adds on its own is not known here, and a turn
// cut at one is rejected). Env and tool messages (mask 0, never trained) are not compared.
import type { ChatMessage } from "../environments/api/messages.js";
import type { TokenizerLike } from "../environments/api/tokenizer.js";
import type { RawRollout } from "./messages.js";
import { RolloutRejectedError } from "./rollout-limits.js";

type TurnSource = Pick<RawRollout, "completionIds" | "completionMask" | "turnOffsets">;

/** [start, end) of each model turn in the completion; null when some mask-1 token lies in no turn. */
export function modelTurnSpans(r: TurnSource): Array<[number, number]> | null {
  const { completionIds: ids, completionMask: mask } = r;
  const spans: Array<[number, number]> = [];
  if (r.turnOffsets.length > 0) {
    r.turnOffsets.forEach((start, k) => {
      const limit = Math.min(r.turnOffsets[k + 1] ?? ids.length, ids.length);
      let end = start;
      while (end < limit && mask[end] === 1) end++;
      spans.push([start, end]);
    });
  } else {
    for (let i = 0; i < ids.length; i++) {
      if (mask[i] !== 1) continue;
      const start = i;
      while (i < ids.length && mask[i] === 1) i++;
      spans.push([start, i]);
    }
  }
  const covered = spans.reduce((n, [s, e]) => n + (e - s), 0);
  const trained = mask.reduce<number>((n, m) => n + (m === 1 ? 1 : 0), 0);
  return covered === trained ? spans : null;
}

/** The text as a parser sees it equals the turn's ids decoded, or that decoding cut before a stop string. */
export function turnTextMatches(text: string, decoded: string, stop: readonly string[]): boolean {
  if (text === decoded) return true;
  return decoded.startsWith(text) && stop.some((s) => s.length > 0 && decoded.startsWith(s, text.length));
}

/**
 * Throws RolloutRejectedError("text", ...) naming rollout `index` and the first model turn whose message text
 * is not what its ids decode to. `completion` is the rollout's messages after the prompt (completionMessages).
 */
export function checkTurnText(
  r: TurnSource,
  completion: readonly ChatMessage[],
  tokenizer: Pick<TokenizerLike, "decode">,
  stop: readonly string[],
  what: string,
): void {
  const spans = modelTurnSpans(r);
  if (!spans) throw new RolloutRejectedError("text", `${what} has model-sampled ids (mask 1) outside every model turn of its turnOffsets`);
  const replies = completion.filter((m) => m.role === "assistant");
  if (replies.length !== spans.length) {
    throw new RolloutRejectedError("text", `${what} has ${spans.length} model turns in its ids but ${replies.length} assistant messages after the prompt`);
  }
  spans.forEach(([start, end], k) => {
    const decoded = tokenizer.decode(r.completionIds.slice(start, end), { skipSpecial: true });
    const text = replies[k]!.content;
    if (!turnTextMatches(text, decoded, stop)) {
      throw new RolloutRejectedError("text", `${what} turn ${k} text does not decode from its ids (${firstDifference(text, decoded)})`);
    }
  });
}

/** Where two strings part, with a little context: `text "…ab|X…" vs ids "…ab|Y…"`. */
function firstDifference(text: string, decoded: string): string {
  let i = 0;
  while (i < text.length && i < decoded.length && text[i] === decoded[i]) i++;
  const from = Math.max(0, i - 12);
  const show = (s: string) => JSON.stringify((from > 0 ? "…" : "") + s.slice(from, i + 24) + (s.length > i + 24 ? "…" : ""));
  return `at character ${i}: text ${show(text)} vs ids ${show(decoded)}`;
}
