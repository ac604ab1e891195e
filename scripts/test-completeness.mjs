import { resolve } from "node:path";

// Checks that every test a run queued was reported passed, failed or skipped, and that every test file
// reported at least one test. Why: a test file's process that ends early with exit code 0 (a stray
// process.exit, a forced exit) drops the tests it had not run yet without a word, and the run would still
// count as green. It listens to the run's event stream directly (events are emitted synchronously), so
// nothing can be in flight when it is read.

const key = (d) => `${d.file ?? "?"}\u0000${d.nesting}\u0000${d.name}\u0000${d.line ?? 0}:${d.column ?? 0}`;

export class TestCompleteness {
  #open = new Map(); // key -> queued tests not yet reported
  #testsPerFile = new Map(); // file -> tests it reported (suites included)
  #counts = new Map(); // file -> { passed, failed, skipped } tests (suites and file entries only when they fail themselves)

  /** Follows a node:test TestsStream (what run() returns). */
  observe(stream) {
    stream.on("test:enqueue", (d) => {
      if (d.file && !this.#testsPerFile.has(d.file)) this.#testsPerFile.set(d.file, 0);
      if (!isFileEntry(d)) this.#open.set(key(d), (this.#open.get(key(d)) ?? 0) + 1);
    });
    const done = (d, failed) => {
      const file = d.file ?? "?";
      if (isFileEntry(d)) {
        if (failed) this.#count(file).failed++; // the file's process itself failed (a crash, a bad exit)
        return;
      }
      const k = key(d);
      const n = this.#open.get(k) ?? 0;
      if (n <= 1) this.#open.delete(k);
      else this.#open.set(k, n - 1);
      this.#testsPerFile.set(file, (this.#testsPerFile.get(file) ?? 0) + 1);
      if (d.details?.type === "suite") {
        // A suite that failed for its own reason (a hook) is a failure; one that failed because a test in
        // it did is already counted with that test.
        if (failed && d.details.error?.failureType !== "subtestsFailed") this.#count(file).failed++;
        return;
      }
      if (failed) this.#count(file).failed++;
      else if (d.skip !== undefined && d.skip !== false) this.#count(file).skipped++;
      else this.#count(file).passed++;
    };
    stream.on("test:pass", (d) => done(d, false));
    stream.on("test:fail", (d) => done(d, true));
    return this;
  }

  #count(file) {
    let c = this.#counts.get(file);
    if (!c) this.#counts.set(file, (c = { passed: 0, failed: 0, skipped: 0 }));
    return c;
  }

  /** Files with a lost test, or that reported none. */
  filesWithLostTests() {
    const files = new Set();
    for (const [file, n] of this.#testsPerFile) if (n === 0) files.add(file);
    for (const k of this.#open.keys()) files.add(k.split("\u0000")[0]);
    return [...files];
  }

  /** This run's view with `files` taken from `other` (a run of just those files). */
  replacingFiles(files, other) {
    const merged = new TestCompleteness();
    const drop = new Set(files);
    for (const from of [this, other]) {
      const keep = (file) => (from === this ? !drop.has(file) : drop.has(file));
      for (const [k, n] of from.#open) if (keep(k.split("\u0000")[0])) merged.#open.set(k, n);
      for (const [f, n] of from.#testsPerFile) if (keep(f)) merged.#testsPerFile.set(f, n);
      for (const [f, c] of from.#counts) if (keep(f)) merged.#counts.set(f, { ...c });
    }
    return merged;
  }

  /** Tests passed, failed and skipped (suites not counted), and tests lost or files that reported none. */
  totals() {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const c of this.#counts.values()) {
      passed += c.passed;
      failed += c.failed;
      skipped += c.skipped;
    }
    return { passed, failed, skipped, lost: this.problems().length };
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
