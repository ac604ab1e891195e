import { TimedWorker } from "../public.js";
import type { Equivalence } from "./equivalence.js";

/** mathEqual with a time limit per check, in a worker thread (see util/timed-worker.ts). */
export class MathVerifier {
  private readonly worker = new TimedWorker<{ gold: string; pred: string }, Equivalence>(new URL("./verify-worker.js", import.meta.url), {
    name: "math verify",
  });

  constructor(readonly timeoutMs = 5_000) {}

  /** Rejects with TimeLimitError past the limit, or with an error if the gold answer itself is unreadable. */
  verify(gold: string, pred: string, timeoutMs = this.timeoutMs): Promise<Equivalence> {
    return this.worker.run({ gold, pred }, timeoutMs);
  }

  close(): Promise<void> {
    return this.worker.close();
  }
}

let shared: MathVerifier | undefined;
/** One verifier per process: the worker (and its mathjs) is started once and shared by all math envs. */
export function sharedMathVerifier(): MathVerifier {
  shared ??= new MathVerifier();
  return shared;
}
