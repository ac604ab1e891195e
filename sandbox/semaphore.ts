// A FIFO counting semaphore with a bounded wait queue: work beyond `permits` waits its turn in
// arrival order; beyond `maxQueued` waiting it is refused at once instead of piling up without end.
export class QueueFullError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "QueueFullError";
  }
}

export class Semaphore {
  private active = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(
    private readonly permits: number,
    private readonly maxQueued = Infinity,
  ) {}

  get running(): number {
    return this.active;
  }

  get queued(): number {
    return this.waiting.length;
  }

  /** Resolves with a release function once a permit is free. */
  acquire(): Promise<() => void> {
    if (this.active < this.permits) {
      this.active++;
      return Promise.resolve(this.releaser());
    }
    if (this.waiting.length >= this.maxQueued) {
      return Promise.reject(new QueueFullError(`${this.waiting.length} requests already waiting (limit ${this.maxQueued})`));
    }
    return new Promise((resolve) => {
      this.waiting.push(() => {
        this.active++;
        resolve(this.releaser());
      });
    });
  }

  async with<T>(fn: () => Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await fn();
    } finally {
      release();
    }
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.active--;
      this.waiting.shift()?.();
    };
  }
}
