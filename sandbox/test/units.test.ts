// Pure pieces of the sandbox, no processes: wire schemas, settings, limits, control framing, output
// capping, the seccomp program and the FIFO semaphore.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { encode } from "@msgpack/msgpack";
import {
  decodeExecRequest,
  decodeExecResult,
  encodeExecRequest,
  encodeExecResult,
  SandboxFilePathSchema,
  SandboxSubjects,
} from "../../streams/sandbox-protocol.js";
import { parseSandboxSettings } from "../settings.js";
import { assertExecUidRanges, execUidRange, sandboxIdMap } from "../isolation.js";
import { resolveLimits, toRlimits } from "../limits.js";
import { encodeFrame, FrameReader } from "../control-frames.js";
import { OutputCollector } from "../output-collector.js";
import { buildSealFilter, buildSeccompFilter, deniedSyscalls } from "../seccomp.js";
import { QueueFullError, Semaphore } from "../semaphore.js";
import { HostUidPool } from "../isolation.js";

describe("sandbox protocol", () => {
  it("round-trips requests and results and rejects bad ones with the field named", () => {
    const req = { language: "python" as const, code: "print(1)", stdin: "x", files: { "a/b.txt": "c" }, limits: { wallMs: 5 } };
    assert.deepEqual(decodeExecRequest(encodeExecRequest(req)), req);
    const res = { stdout: "1\n", stderr: "", exitCode: 0, signal: null, timedOut: false, outOfMemory: false, outputTruncated: false, wallMs: 1.5, cpuMs: 2 };
    assert.deepEqual(decodeExecResult(encodeExecResult(res)), res);
    assert.throws(() => decodeExecRequest(encode({ language: "python", code: "1", limits: { wallMs: 1.5 } })), /limits\.wallMs/);
    assert.throws(() => decodeExecRequest(encode({ language: "python", code: "1", limits: { wallMS: 5 } })), /limits/);
    assert.throws(() => decodeExecRequest(encode([1, 2])), /sandbox exec request/);
    assert.equal(SandboxSubjects.sessionExec("abc"), "rs.sandbox.session.abc.exec");
  });

  it("accepts only relative file paths inside the work dir", () => {
    for (const ok of ["a.txt", "dir/sub/file.py", ".hidden"]) assert.equal(SandboxFilePathSchema.safeParse(ok).success, true, ok);
    for (const bad of ["/etc/passwd", "../x", "a/../../x", "a//b", "", "a\0b", "dir/"])
      assert.equal(SandboxFilePathSchema.safeParse(bad).success, false, JSON.stringify(bad));
  });
});

describe("sandbox settings and limits", () => {
  it("has documented defaults and names bad fields", () => {
    const s = parseSandboxSettings({});
    assert.equal(s.poolSize, 4);
    assert.equal(s.limits.wallMs, 10_000);
    assert.equal(s.maxLimits.memoryMb, 8192);
    assert.equal(s.runtimes.python.binary, "auto");
    assert.equal(s.isolation.seccomp, "auto");
    assert.ok(s.maxConcurrent >= 4);
    assert.throws(() => parseSandboxSettings({ poolSize: -1 }), /sandbox\.poolSize/);
    assert.throws(() => parseSandboxSettings({ limits: { wallMs: "fast" } }), /sandbox\.limits\.wallMs/);
  });

  it("clamps request limits to the caps and maps them to rlimits", () => {
    const s = parseSandboxSettings({ maxLimits: { wallMs: 2000 } });
    const l = resolveLimits(s, { wallMs: 1e9, memoryMb: 100, maxOutputBytes: 1 << 30 }, 5000);
    assert.equal(l.wallMs, 2000);
    assert.equal(l.memoryMb, 100);
    assert.equal(l.maxOutputBytes, 5000);
    assert.equal(l.cpuMs, s.limits.cpuMs);
    const py = toRlimits({ ...l, cpuMs: 1500 }, "python", 1024);
    assert.deepEqual(py.cpu, [2, 3]);
    assert.equal(py.data, 100 * 1024 * 1024);
    assert.equal(py.as, (100 + 1024) * 1024 * 1024);
    assert.equal(py.nproc, l.maxProcesses + 1);
    assert.equal(toRlimits(l, "node", 1024).as, (100 + 2048) * 1024 * 1024, "node gets room for its reservations");
  });
});

describe("sandbox plumbing", () => {
  it("frames control messages and reassembles them from any fragmentation", () => {
    const a = encodeFrame(["run", "python", Buffer.from([0, 1, 2]), 42, ""]);
    const b = encodeFrame(["kill"]);
    const all = Buffer.concat([a, b]);
    const reader = new FrameReader();
    const frames: Buffer[][] = [];
    for (let i = 0; i < all.length; i += 3) frames.push(...reader.push(all.subarray(i, i + 3)));
    assert.equal(frames.length, 2);
    assert.deepEqual(
      frames[0]!.map((f) => f.toString("latin1")),
      ["run", "python", "\x00\x01\x02", "42", ""],
    );
    assert.deepEqual(frames[1]!.map(String), ["kill"]);
  });

  it("caps output, strips the end marker and reports truncation", () => {
    const marker = Buffer.from("\0rs-end:abc\0");
    const c = new OutputCollector(10, marker.length);
    c.push(Buffer.from("0123456789"));
    assert.equal(c.overflowing, false);
    c.push(marker);
    assert.deepEqual(c.finish(marker), { text: "0123456789", truncated: false });
    const d = new OutputCollector(4, marker.length);
    d.push(Buffer.from("x".repeat(100)));
    assert.equal(d.overflowing, true);
    d.push(marker);
    assert.deepEqual(d.finish(marker), { text: "xxxx", truncated: true });
    assert.equal(d.endsWith(marker), true, "the marker is found even after the cap");
  });

  it("builds a well-formed seccomp program for this architecture", () => {
    const f = buildSeccompFilter();
    if (f === null) {
      assert.deepEqual(deniedSyscalls(), []);
      return;
    }
    assert.equal(f.length % 8, 0);
    assert.equal(f.readUInt16LE(0), 0x20, "starts by loading the architecture");
    assert.equal(f.readUInt32LE(4), 4, "at offset 4 of seccomp_data");
    assert.equal(f.readUInt16LE(f.length - 8), 0x06, "ends with a return");
    const returns = new Set<number>();
    for (let i = 0; i < f.length; i += 8) if (f.readUInt16LE(i) === 0x06) returns.add(f.readUInt32LE(i + 4));
    assert.ok(returns.has(0x7fff0000) && returns.has(0x00050001) && returns.has(0x80000000), "allow, EPERM and kill are all reachable outcomes");
    assert.ok(deniedSyscalls().includes("ptrace") && deniedSyscalls().includes("bpf"));
  });

  it("leaves io_uring_setup and io_uring_register to the supervisor's start only where it seals them off after", () => {
    const f = buildSeccompFilter();
    if (f === null) return;
    // The syscall numbers a filter compares against (JEQ k), and whether each leads to EPERM.
    const compared = (b: Buffer) => {
      const ks = new Set<number>();
      for (let i = 0; i < b.length; i += 8) if (b.readUInt16LE(i) === 0x15) ks.add(b.readUInt32LE(i + 4));
      return ks;
    };
    const [setup, enter, register] = [425, 426, 427];
    const plain = compared(f);
    assert.ok(plain.has(setup) && plain.has(enter) && plain.has(register), "the sandbox's filter refuses all three");
    const pin = compared(buildSeccompFilter({ pinAtStart: true })!);
    assert.ok(!pin.has(setup) && !pin.has(register) && pin.has(enter), "pinAtStart leaves setup and register, never enter");
    assert.equal(pin.size, plain.size - 2, "and nothing else");
    const seal = buildSealFilter()!;
    const sealed = compared(seal);
    assert.ok(sealed.has(setup) && sealed.has(register), "the seal refuses what the sandbox's filter left");
    const returns = new Set<number>();
    for (let i = 0; i < seal.length; i += 8) if (seal.readUInt16LE(i) === 0x06) returns.add(seal.readUInt32LE(i + 4));
    assert.ok(returns.has(0x00050001) && returns.has(0x80000000), "with EPERM, and a kill for another architecture");
  });

  it("queues beyond its permits in FIFO order and refuses beyond maxQueued", async () => {
    const sem = new Semaphore(1, 2);
    const order: number[] = [];
    const r1 = await sem.acquire();
    const p2 = sem.acquire().then((rel) => (order.push(2), rel));
    const p3 = sem.acquire().then((rel) => (order.push(3), rel));
    await assert.rejects(sem.acquire(), QueueFullError);
    assert.equal(sem.queued, 2);
    r1();
    (await p2)();
    (await p3)();
    assert.deepEqual(order, [2, 3]);
    assert.equal(sem.running, 0);
  });

  it("never hands out a host uid twice while it is in use", () => {
    const pool = new HostUidPool(1000, 3);
    const a = [pool.acquire(), pool.acquire(), pool.acquire()];
    assert.deepEqual(a, [1000, 1001, 1002]);
    assert.throws(() => pool.acquire(), /hostUidCount/);
    pool.release(1001);
    assert.equal(pool.acquire(), 1001);
  });
});

describe("per-execution uid ranges (isolation.perExecutionUid)", () => {
  it("each sandbox's range follows from its host uid, and the maps name both", () => {
    const s = parseSandboxSettings({ maxExecsPerSandbox: 1000 });
    const base = s.isolation.hostUidBase;
    assert.deepEqual(execUidRange(s, base), { first: s.isolation.execUidBase, count: 1000 });
    assert.deepEqual(execUidRange(s, base + 3), { first: s.isolation.execUidBase + 3000, count: 1000 });
    assert.equal(sandboxIdMap(s, base + 3), `65534 ${base + 3} 1\n100000 ${s.isolation.execUidBase + 3000} 1000\n`);
    // Capped: more executions than 4096 take the uids in turn.
    assert.equal(execUidRange(parseSandboxSettings({ maxExecsPerSandbox: 1_000_000 }), base).count, 4096);
  });

  it("ranges that leave the uid space or overlap the sandboxes' uids are refused in one line; the defaults pass", () => {
    assert.doesNotThrow(() => assertExecUidRanges(parseSandboxSettings({})));
    assert.throws(
      () => assertExecUidRanges(parseSandboxSettings({ isolation: { execUidBase: 4_250_000_000 } })),
      /^Error: sandbox settings\.isolation: per-execution uids \[4250000000, \d+\) pass the last uid/,
    );
    assert.throws(() => assertExecUidRanges(parseSandboxSettings({ isolation: { execUidBase: 1_499_000_000 } })), /overlap the sandboxes' uids/);
  });
});
