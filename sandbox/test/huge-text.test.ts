// A sandbox that serves many commands moves its interpreter's code (python's, and the node fork server's) onto
// transparent huge pages once it has forked 8 executions (sandbox/supervisor/huge-text.h): python's at once,
// node's 2 MiB an execution. Each execution reads its own /proc/self/smaps: from then on, the code sits in an
// anonymous read+execute mapping on huge pages, right beside the interpreter's file mappings; before, it is
// the file's.
// The control is a service with a fresh sandbox per execution (maxExecsPerSandbox: 1), which never forks 8:
// its executions run the code from the file throughout, and the programs' output is the same in both. Where
// this machine's kernel gives no huge pages (THP "never"), nothing may move in either.
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

function thpAvailable(): boolean {
  try {
    return /\[(always|madvise)\]/.test(readFileSync("/sys/kernel/mm/transparent_hugepage/enabled", "utf8"));
  } catch {
    return false;
  }
}

// kB on huge pages of anonymous executable mappings that touch one of the executable's own file mappings,
// and whether any executable file mapping of the executable is left. The same walk in both languages.
const PYTHON_PROBE = `
import os, json
exe = os.path.realpath("/proc/self/exe")
maps, cur = [], None
for line in open("/proc/self/smaps"):
    f = line.split()
    if len(f) >= 5 and "-" in f[0] and len(f[1]) == 4:
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        cur = {"lo": lo, "hi": hi, "perm": f[1], "path": f[5] if len(f) > 5 else "", "huge": 0}
        maps.append(cur)
    elif f and f[0] == "AnonHugePages:":
        cur["huge"] = int(f[1])
ends = {m["lo"] for m in maps if m["path"] == exe} | {m["hi"] for m in maps if m["path"] == exe}
moved = sum(m["huge"] for m in maps if m["path"] == "" and "x" in m["perm"] and (m["lo"] in ends or m["hi"] in ends))
print(json.dumps({"moved_kb": moved, "file_code": any(m["path"] == exe and "x" in m["perm"] for m in maps)}))
`;
const NODE_PROBE = `
const fs = require("fs");
const exe = fs.realpathSync("/proc/self/exe");
const maps = [];
let cur = null;
for (const line of fs.readFileSync("/proc/self/smaps", "utf8").split("\\n")) {
  const f = line.trim().split(/\\s+/);
  if (f.length >= 5 && f[0].includes("-") && f[1].length === 4) {
    const [lo, hi] = f[0].split("-").map((x) => parseInt(x, 16));
    cur = { lo, hi, perm: f[1], path: f[5] ?? "", huge: 0 };
    maps.push(cur);
  } else if (f[0] === "AnonHugePages:") cur.huge = Number(f[1]);
}
const ends = new Set(maps.filter((m) => m.path === exe).flatMap((m) => [m.lo, m.hi]));
const moved = maps.filter((m) => m.path === "" && m.perm.includes("x") && (ends.has(m.lo) || ends.has(m.hi))).reduce((s, m) => s + m.huge, 0);
console.log(JSON.stringify({ moved_kb: moved, file_code: maps.some((m) => m.path === exe && m.perm.includes("x")) }));
`;
const WORK = "import json, re, hashlib\nprint(json.dumps(sorted(re.findall(r'[a-z]+', 'the code moved'))), hashlib.sha256(b'x' * 100000).hexdigest()[:16])\n";

describe("interpreter code on huge pages", { timeout: 180_000 }, () => {
  let on: SandboxFixture;
  let off: SandboxFixture;
  const thp = thpAvailable();
  before(async () => {
    on = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1 });
    off = await startSandboxFixture({ poolSize: 1, maxConcurrent: 1, maxExecsPerSandbox: 1 });
  });
  after(async () => {
    await on?.stop();
    await off?.stop();
  });

  // Executions 1..n of the one sandbox of each kind (of n sandboxes, for the control), one after another: what
  // each saw.
  async function seen(fx: SandboxFixture, language: "python" | "node", code: string, n: number): Promise<Array<{ moved_kb: number; file_code: boolean }>> {
    const out = [];
    for (let i = 0; i < n; i++) {
      const r = await fx.client.exec({ language, code });
      assert.equal(r.exitCode, 0, describeResult(r));
      out.push(JSON.parse(r.stdout) as { moved_kb: number; file_code: boolean });
    }
    return out;
  }

  const AFTER = 8;

  it(`python: the first ${AFTER} executions run the interpreter's code from the file, the next from huge pages, all moved at once; with a sandbox per execution, all from the file`, async () => {
    const got = await seen(on, "python", PYTHON_PROBE, AFTER + 4);
    const show = JSON.stringify(got.map((g) => g.moved_kb));
    for (const g of got.slice(0, AFTER)) assert.equal(g.moved_kb, 0, show);
    assert.equal(got[0]!.file_code, true, show);
    for (const g of got.slice(AFTER)) {
      if (thp) assert.ok(g.moved_kb >= 2048 && g.moved_kb === got[AFTER]!.moved_kb, `not all on huge pages at once: ${show}`);
      else assert.equal(g.moved_kb, 0, show);
    }
    const control = await seen(off, "python", PYTHON_PROBE, AFTER + 4);
    for (const g of control) assert.deepEqual(g, { moved_kb: 0, file_code: true }, JSON.stringify(control));
  });

  // The node fork server forks on request, so it moves 2 MiB after each fork, while that execution runs: the
  // next execution finds 2 MiB more, in the same mapping as the rest (a piece apart from the file's mappings
  // would not count), until all of node's code (~26 MiB) has moved.
  it(`node: the first ${AFTER} executions run node's code from the file, each next one finds 2 MiB more on huge pages, in one mapping; with a sandbox per execution, all from the file`, async () => {
    const got = await seen(on, "node", NODE_PROBE, AFTER + 20);
    const show = JSON.stringify(got.map((g) => g.moved_kb));
    for (const g of got.slice(0, AFTER)) assert.equal(g.moved_kb, 0, show);
    assert.equal(got[0]!.file_code, true, show);
    if (thp) {
      assert.equal(got[AFTER]!.moved_kb, 2048, show);
      let i = AFTER + 1;
      for (; i < got.length && got[i]!.moved_kb !== got[i - 1]!.moved_kb; i++) assert.equal(got[i]!.moved_kb, got[i - 1]!.moved_kb + 2048, show);
      for (; i < got.length; i++) assert.equal(got[i]!.moved_kb, got[i - 1]!.moved_kb, show);
      assert.ok(got.at(-1)!.moved_kb >= 8192, `node's code moved in pieces that stayed apart, or too little of it: ${show}`);
    } else for (const g of got) assert.equal(g.moved_kb, 0, show);
    const control = await seen(off, "node", NODE_PROBE, AFTER + 4);
    for (const g of control) assert.deepEqual(g, { moved_kb: 0, file_code: true }, JSON.stringify(control));
  });

  it("programs print the same with the code moved or not, execution after execution", async () => {
    const want = await off.client.exec({ language: "python", code: WORK });
    assert.equal(want.exitCode, 0, describeResult(want));
    for (let i = 0; i < 12; i++) {
      const r = await on.client.exec({ language: "python", code: WORK });
      assert.deepEqual([r.exitCode, r.stdout, r.stderr], [0, want.stdout, ""], describeResult(r));
    }
  });
});
