import { resolve } from "node:path";

// Checks that every test a run queued was reported passed, failed or skipped, and that every test file
// reported at least one test. Why: a test file's process that ends early with exit code 0 (a stray
// process.exit, a forced exit) drops the tests it had not run yet without a word, and the run would still
// count as green. It listens to the run's event stream directly (events are emitted synchronously), so
// nothing can be in flight when it is read.

const key = (d) => `${d.file ?? "?"}\u0000${d.nesting}\u0000${d.name}\u0000${d.line ?? 0}:${d.column ?? 0}`;

export class TestCompleteness {
  #open = new Map(); // key -> queued tests not yet reported
  #testsPerFile = new Map(); // file -> tests it reported

  /** Follows a node:test TestsStream (what run() returns). */
  observe(stream) {
    stream.on("test:enqueue", (d) => {
      if (d.file && !this.#testsPerFile.has(d.file)) this.#testsPerFile.set(d.file, 0);
      if (!isFileEntry(d)) this.#open.set(key(d), (this.#open.get(key(d)) ?? 0) + 1);
    });
    const done = (d) => {
      if (isFileEntry(d)) return;
      const k = key(d);
      const n = this.#open.get(k) ?? 0;
      if (n <= 1) this.#open.delete(k);
      else this.#open.set(k, n - 1);
      if (d.file) this.#testsPerFile.set(d.file, (this.#testsPerFile.get(d.file) ?? 0) + 1);
    };
    stream.on("test:pass", done);
    stream.on("test:fail", done);
    return this;
  }

  /** One line per lost test or empty file; none when the run was complete. */
  problems() {
    const lines = [];
    for (const [file, n] of this.#testsPerFile) if (n === 0) lines.push(`${file} reported no test at all`);
    for (const [k, count] of this.#open) {
      const [file, , name, at] = k.split("\u0000");
      lines.push(`"${name}" (${file}:${at})${count > 1 ? ` ×${count}` : ""} was queued but never reported passed, failed or skipped`);
    }
    return lines;
  }
}

// The runner's own entry for a whole test file: it reports passed only when the file ran no test, so it is
// kept out of the count.
function isFileEntry(d) {
  return d?.nesting === 0 && d.file !== undefined && resolve(d.name) === d.file;
}
