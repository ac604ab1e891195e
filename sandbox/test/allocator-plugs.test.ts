// The supervisor fills the free blocks of pymalloc's partly used pools before it forks (plug_allocator_holes),
// so that a child's allocations land side by side in fresh pools instead of on many pages it shares with
// pid 1. Checked on the supervisor's own function, loaded outside a sandbox: holes made on purpose (half
// the objects of one size class freed) are there before it runs (the control) and gone after.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { supervisorDir } from "../supervisor-source.js";
import { join } from "node:path";

const SCRIPT = `
import sys
sup = {"__name__": "supervisor_under_test"}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), sup)
def free_blocks(size):
    return dict(sup["allocator_free_blocks"]()).get(size, 0)
header = sys.getsizeof(b"")
kept = [bytes(200 - header) for _ in range(20000)]
del kept[::2]
before = free_blocks(208)
sup["plug_allocator_holes"]()
after = free_blocks(208)
print(before, after, len(sup["ALLOCATOR_PLUGS"]))
`;

describe("the supervisor's allocator plugs", () => {
  it("fills the freed blocks of partly used pools (control: the holes made on purpose are there before)", () => {
    const r = spawnSync("/usr/bin/python3", ["-I", "-S", "-c", SCRIPT, join(supervisorDir(), "supervisor.py")], { encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    const [before, after, plugs] = r.stdout.trim().split(" ").map(Number) as [number, number, number];
    assert.ok(before >= 9000, `the control sees the holes: ${before} free blocks of 208 bytes`);
    assert.ok(after < before / 20, `after plugging: ${after} of ${before} free blocks left`);
    assert.ok(plugs >= before, `${plugs} plugs`);
  });
});
