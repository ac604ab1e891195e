// What one page fault costs on this machine, measured in the benchmark's own run. A warm sandbox
// execution is a fork of a warm interpreter that then takes ~230 copy-on-write faults, a bare `python3 -c`
// thousands: on a virtual machine where a fault traps to the hypervisor (10-40 us instead of ~0.2 us on bare
// metal), these faults are most of both, and the ratio between the two moves with it from machine to machine.

const PAGE = 4096;

/**
 * Microseconds per page fault: filling a freshly mapped buffer (a fault per page, plus the writes) minus
 * filling it again (the writes alone), over its pages; the median of `rounds` fresh buffers.
 */
export function pageFaultMicros(bytes = 64 * 1024 * 1024, rounds = 5): number {
  const costs: number[] = [];
  for (let r = 0; r < rounds; r++) {
    // allocUnsafeSlow: a buffer of its own, not from the pool; at this size malloc maps it fresh (untouched).
    const buf = Buffer.allocUnsafeSlow(bytes);
    const t0 = performance.now();
    buf.fill(r + 1);
    const first = performance.now() - t0;
    const t1 = performance.now();
    buf.fill(r + 2);
    const again = performance.now() - t1;
    costs.push(((first - again) * 1000) / (bytes / PAGE));
  }
  costs.sort((a, b) => a - b);
  return costs[Math.floor(costs.length / 2)]!;
}
