// The newest policy version a reader can trust. KV policy.version says it (the learner writes it just after it
// announces the weights on rs.<run>.weights), but the KV is anyone's to write (`nats kv put`): a value that is not
// JSON, or one beyond what any learner of the run can have trained (rl.steps), is a fault of the run's state, never
// of a message and never of the server. Readers do not drop data over it: the fault is reported once per stored
// revision, naming the bucket, the key and the value, and the newest version announced on the weights stream —
// what the learner itself last published — stands in for it.
import type { WeightsChannel } from "./channels/weights-channel.js";
import type { RunState, StateRead } from "./run-state.js";
import { StateKeys } from "./state-keys.js";

/** What a reader is told about a bad control value: one line for a person, and the key's revision it is about. */
export interface RunStateProblem {
  message: string;
  key: string;
  revision: number;
}

export class PolicyVersions {
  private reportedRevision = -1;
  /** The valid KV value newest() last read, and the revision of one a reader found no weights behind (passed over until the key changes). */
  private lastRead: { bucket: string; revision: number; value: number } | null = null;
  private distrusted = -1;

  constructor(
    private readonly state: RunState,
    private readonly weights: WeightsChannel,
    /** rl.steps: RL step n publishes version n, so no learner of this run makes a later one. */
    readonly maxVersion: number,
    private readonly onProblem: (p: RunStateProblem) => void,
  ) {}

  /** Whether a valid KV value is within what the run can have trained (an actor's watch checks it without a read). */
  plausible(version: number): boolean {
    return version <= this.maxVersion;
  }

  /**
   * The version to use as the newest: KV policy.version when it is valid and plausible (-1 when absent: no version
   * yet); else the newest announced one, with the fault reported; null when there is none of those either (nothing
   * to trust yet: wait, or hold the work).
   */
  async newest(): Promise<number | null> {
    const read = await this.state.read(StateKeys.policyVersion);
    if (read === undefined) return -1;
    this.lastRead = "value" in read ? { bucket: read.bucket, revision: read.revision, value: read.value } : null;
    if ("value" in read && this.plausible(read.value) && read.revision !== this.distrusted) return read.value;
    const announced = await this.weights.lastAnnounced();
    if (read.revision !== this.distrusted) this.report(read, announced);
    return announced;
  }

  /** The version of the newest weights announcement (null before any): the learner's own word, for a reader that must be sure. */
  lastAnnounced(): Promise<number | null> {
    return this.weights.lastAnnounced();
  }

  /**
   * Passes over the valid value newest() last read, for a reason the reader found (the evaluator: no weights were
   * ever announced for it): reported once with `why`, and newest() answers the newest announced version until the
   * key changes.
   */
  distrustLastRead(why: string): void {
    const r = this.lastRead;
    if (r === null) return;
    this.distrusted = r.revision;
    this.reportOnce({
      message: `run state: KV ${r.bucket} ${StateKeys.policyVersion} is ${r.value}, ${why}`,
      key: StateKeys.policyVersion,
      revision: r.revision,
    });
  }

  private report(read: StateRead<typeof StateKeys.policyVersion>, announced: number | null): void {
    const what =
      "value" in read
        ? `run state: KV ${read.bucket} ${StateKeys.policyVersion} is ${read.value}, beyond rl.steps ${this.maxVersion} (no learner of this run can have trained it)`
        : read.error.message;
    const instead =
      announced === null ? "no weights version is announced either: waiting for one" : `using the newest announced weights version ${announced} instead`;
    this.reportOnce({ message: `${what}; ${instead}`, key: StateKeys.policyVersion, revision: read.revision });
  }

  private reportOnce(p: RunStateProblem): void {
    if (p.revision === this.reportedRevision) return;
    this.reportedRevision = p.revision;
    this.onProblem(p);
  }
}
