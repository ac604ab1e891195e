// Lets a consumer run a suspect message alone. Ordinary messages share the gate; a redelivered one
// (it may be what killed the actor last time) waits until nothing else runs and keeps the others out
// while it runs, so a crash during it is its own and not blamed on the messages next to it.
// Requests are served in arrival order, so a waiting exclusive request is not starved by shared ones.
export class RedeliveryGate {
  private sharedHolders = 0;
  private exclusiveHeld = false;
  private readonly queue: Array<{ exclusive: boolean; grant: () => void }> = [];

  acquire(exclusive: boolean): Promise<() => void> {
    return new Promise((resolve) => {
      this.queue.push({ exclusive, grant: () => resolve(this.releaser(exclusive)) });
      this.pump();
    });
  }

  private releaser(exclusive: boolean): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (exclusive) this.exclusiveHeld = false;
      else this.sharedHolders--;
      this.pump();
    };
  }

  private pump(): void {
    while (this.queue.length > 0 && !this.exclusiveHeld) {
      const head = this.queue[0]!;
      if (head.exclusive && this.sharedHolders > 0) return;
      this.queue.shift();
      if (head.exclusive) this.exclusiveHeld = true;
      else this.sharedHolders++;
      head.grant();
    }
  }
}
