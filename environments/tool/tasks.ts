import { isEvalTask, rngFor, type Rng } from "../public.js";

/**
 * Questions about fictional cities whose populations exist only in a per-task lookup table, so the
 * model cannot answer from memory: it has to call lookup, and the arithmetic invites the calculator.
 */
export interface CityTask {
  question: string;
  /** City -> population, including distractor cities the question does not ask about. */
  table: Record<string, number>;
  /** The cities the question needs. */
  needed: string[];
  answer: number;
}

const ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "qu", "th", "br", "tr"];
const VOWELS = ["a", "e", "i", "o", "u", "ae", "io"];
const CODAS = ["", "n", "r", "s", "l", "th", "m"];

function cityName(rng: Rng): string {
  const syl = () => rng.pick(ONSETS) + rng.pick(VOWELS);
  const name = syl() + syl() + (rng.next() < 0.5 ? syl() : "") + rng.pick(CODAS);
  return name[0]!.toUpperCase() + name.slice(1);
}

function makeTask(rng: Rng): CityTask {
  const names = new Set<string>();
  while (names.size < 4) names.add(cityName(rng));
  const cities = [...names];
  const table = Object.fromEntries(cities.map((c) => [c, rng.int(1_000, 99_999)]));
  const [a, b] = cities as [string, string];
  const kind = rng.int(0, 2);
  if (kind === 0) {
    return { question: `What is the combined population of ${a} and ${b}?`, table, needed: [a, b], answer: table[a]! + table[b]! };
  }
  if (kind === 1) {
    const [big, small] = table[a]! >= table[b]! ? [a, b] : [b, a];
    return { question: `How many more people live in ${big} than in ${small}?`, table, needed: [big, small], answer: table[big]! - table[small]! };
  }
  const k = rng.int(2, 9);
  return { question: `If the population of ${a} grew ${k}-fold, what would it be?`, table, needed: [a], answer: table[a]! * k };
}

export function taskFor(seed: number, split: "train" | "eval", index: number): CityTask {
  const rng = rngFor(seed, split, index);
  for (;;) {
    const t = makeTask(rng);
    if (isEvalTask(seed, t.question) === (split === "eval")) return t;
  }
}
