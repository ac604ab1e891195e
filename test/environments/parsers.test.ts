import { test } from "node:test";
import assert from "node:assert/strict";
import { BoxedParser, PlainParser, ThinkParser, XMLParser, extractBoxed, type ChatMessage } from "../../environments/api/index.js";

test("PlainParser: trimmed reply, empty is unparseable", () => {
  const p = new PlainParser();
  assert.deepEqual(p.parse("  42 \n"), { answer: "42" });
  assert.equal(p.parse("   ").answer, null);
  assert.equal(p.formatScore(""), 0);
});

test("ThinkParser: answer after </think>; format needs one well-formed think block", () => {
  const p = new ThinkParser(new BoxedParser());
  const good = "<think>2+2 is 4</think>The answer is \\boxed{4}.";
  assert.equal(p.parseAnswer(good), "4");
  assert.equal(p.formatScore(good), 1);
  assert.equal(p.parseAnswer("<think>maybe \\boxed{3}</think> so \\boxed{4}"), "4", "box inside think is ignored");
  assert.equal(p.formatScore("\\boxed{4}"), 0, "missing think block");
  assert.equal(p.formatScore("<think>a</think><think>b</think>\\boxed{4}"), 0, "two think blocks");
  assert.equal(p.formatScore("<think>only thinking</think>"), 0, "nothing after think");
  assert.equal(p.parseAnswer("no think but \\boxed{7}"), "7", "lenient parse without think");
});

test("XMLParser: last field value, strict format, unclosed final field still parsed", () => {
  const p = new XMLParser(["reasoning", "answer"]);
  const good = "<reasoning>\n3*4=12\n</reasoning>\n<answer> 12 </answer>";
  assert.equal(p.parseAnswer(good), "12");
  assert.equal(p.formatScore(good), 1);
  assert.deepEqual(p.parseFields(good), { reasoning: "3*4=12", answer: "12" });
  assert.equal(p.formatScore("<answer>12</answer><reasoning>x</reasoning>"), 0, "wrong order");
  assert.equal(p.formatScore(good + " trailing"), 0, "text after the fields");
  assert.equal(p.parseAnswer("<answer>1</answer> then <answer>2</answer>"), "2");
  assert.equal(p.parseAnswer("<reasoning>x</reasoning><answer>5"), "5");
  assert.deepEqual(p.parse("no tags"), { answer: null, reason: "no <answer> field" });
  assert.equal(p.format({ reasoning: "r", answer: "a" }), "<reasoning>r</reasoning>\n<answer>a</answer>");
  assert.throws(() => new XMLParser([]), /at least one field/);
  assert.throws(() => new XMLParser(["a b"]), /invalid field name/);
});

test("extractBoxed: nested braces, last box, escaped braces, \\boxed 5, \\fbox", () => {
  assert.equal(extractBoxed("so \\boxed{\\frac{1}{2}}"), "\\frac{1}{2}");
  assert.equal(extractBoxed("\\boxed{1} then \\boxed{2}"), "2");
  assert.equal(extractBoxed("\\boxed{\\{1, 2\\}}"), "\\{1, 2\\}");
  assert.equal(extractBoxed("answer: \\boxed 5"), "5");
  assert.equal(extractBoxed("\\fbox{x+1}"), "x+1");
  assert.equal(extractBoxed("\\boxed{unclosed"), null);
  assert.equal(extractBoxed("nothing"), null);
  const p = new BoxedParser();
  assert.equal(p.parse("nothing").reason, "no \\boxed{} answer");
  assert.equal(p.formatScore("\\boxed{}"), 0);
});

test("formatReward averages over assistant messages and ignores env/tool text", () => {
  const p = new XMLParser(["answer"]);
  const completion: ChatMessage[] = [
    { role: "assistant", content: "<answer>1</answer>" },
    { role: "tool", content: "<answer>not the model</answer>" },
    { role: "assistant", content: "oops" },
  ];
  assert.equal(p.formatReward(completion), 0.5);
  assert.equal(p.parseAnswer(completion), null, "the last assistant message has no answer");
  assert.equal(p.formatReward([{ role: "user", content: "x" }]), 0);
});
