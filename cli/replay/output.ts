// What replay prints: one line per step compared with the record, or under --set a side-by-side table of
// recorded and replayed figures; --json prints one JSON object per step on stdout and the prose (backend,
// settings, summary) on stderr, so stdout stays machine-readable.
import { FIGURE_LABEL, FIGURES, type Comparison, type Figures } from "./figures.js";

export class ReplayOutput {
  constructor(readonly json: boolean) {}

  say(line: string): void {
    if (this.json) process.stderr.write(`${line}\n`);
    else console.log(line);
  }

  object(value: unknown): void {
    console.log(JSON.stringify(value));
  }
}

const num = (x: number | undefined) => (x === undefined ? "-" : String(Number(x.toPrecision(6))));
const TABLE = FIGURES.slice(0, 4);
const CELL = 12; // -0.000129491, -1.23457e-10

const center = (s: string, width: number) => s.padStart(Math.floor((width + s.length) / 2)).padEnd(width);

export function tableHeader(): string[] {
  return [
    `${"".padStart(5)}  ${TABLE.map((f) => center(FIGURE_LABEL[f], 2 * CELL + 1)).join(" | ")}`.trimEnd(),
    `${"step".padStart(5)}  ${TABLE.map(() => `${"recorded".padStart(CELL)} ${"replayed".padStart(CELL)}`).join(" | ")}`,
  ];
}

export function tableRow(step: number, recorded: Figures | undefined, replayed: Figures, leftOut: number): string {
  const cells = TABLE.map((f) => `${num(recorded?.[f]).padStart(CELL)} ${num(replayed[f]).padStart(CELL)}`);
  return `${String(step).padStart(5)}  ${cells.join(" | ")}${leftOut > 0 ? `  (${leftOut} rows left out)` : ""}`;
}

export function stepLine(step: number, replayed: Figures, recorded: Figures | undefined, c: Comparison, matched: boolean | null, samples: number): string {
  const tail = `(grad norm ${replayed.gradNorm?.toFixed(4)}, ${samples} samples)`;
  if (c.exact === null) return `step ${step}: loss ${replayed.loss} (not in the run's record) ${tail}`;
  const head = `step ${step}: loss ${replayed.loss} recorded ${recorded?.loss}`;
  if (c.exact) return `${head} bit-exact ${tail}`;
  // A loss near 0 is the remainder of a cancelling sum: its relative difference can be large, hence the absolute one.
  const diff = `largest relative difference ${c.maxRelDiff!.toExponential(2)} in ${FIGURE_LABEL[c.figure!]} (absolute ${c.absDiff!.toExponential(2)})`;
  return matched === false ? `${head} differs on this backend: ${diff} ${tail}` : `${head} MISMATCH: ${diff} ${tail}`;
}
