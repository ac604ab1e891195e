import { test } from "node:test";
import assert from "node:assert/strict";
import { maxSatisfying, satisfies } from "../../environments/semver.js";

const cases: Array<[string, string, boolean]> = [
  ["1.2.3", "1.2.3", true], ["1.2.4", "1.2.3", false], ["1.2.3", "=1.2.3", true], ["1.2.3", "v1.2.3", true],
  ["1.9.0", "^1.2.3", true], ["2.0.0", "^1.2.3", false], ["1.2.2", "^1.2.3", false],
  ["0.2.9", "^0.2.3", true], ["0.3.0", "^0.2.3", false], ["0.0.3", "^0.0.3", true], ["0.0.4", "^0.0.3", false],
  ["0.9.0", "^0.x", true], ["1.0.0", "^0", false], ["0.0.9", "^0.0.x", true], ["0.1.0", "^0.0", false],
  ["1.2.9", "~1.2.3", true], ["1.3.0", "~1.2.3", false], ["1.2.0", "~1.2", true], ["1.9.9", "~1", true], ["2.0.0", "~1", false],
  ["1.4.7", "1.x", true], ["2.0.0", "1.x", false], ["1.2.7", "1.2.*", true], ["1.3.0", "1.2.X", false], ["3.1.4", "*", true], ["3.1.4", "", true],
  ["1.5.0", "1", true], ["1.2.0", "1.2", true], ["1.3.0", "1.2", false],
  ["2.0.0", ">=1.2.3", true], ["1.2.2", ">=1.2.3", false], ["1.2.3", ">1.2.3", false], ["1.3.0", ">1.2", true], ["1.2.9", ">1.2", false],
  ["1.2.2", "<1.2.3", true], ["1.2.9", "<=1.2", true], ["1.3.0", "<=1.2", false], ["0.9.0", "<1", true],
  ["1.5.0", ">=1.2.3 <2.0.0", true], ["2.0.0", ">=1.2.3 <2.0.0", false], ["1.5.0", ">= 1.2.3 < 2", true],
  ["3.0.1", "^1.0.0 || ^3.0.0", true], ["2.0.0", "^1.0.0 || ^3.0.0", false],
  ["1.5.0", "1.2.3 - 1.6", true], ["1.7.0", "1.2.3 - 1.6", false], ["1.6.9", "1.2.3 - 1.6", true],
  ["1.2.3-beta.2", "^1.2.3-beta.1", true], ["1.2.3-alpha", "^1.2.3-beta.1", false], ["1.2.4-beta.1", "^1.2.3-beta.1", false],
  ["1.2.3-beta.1", ">=1.0.0", false], ["1.2.3", "1.2.3-rc.1 - 1.2.3", true], ["not.a.version", "*", false],
];

test("satisfies: exact, ^, ~, x-ranges, comparators, AND, ||, hyphen ranges, prereleases", () => {
  for (const [v, r, want] of cases) assert.equal(satisfies(v, r), want, `${v} satisfies "${r}" should be ${want}`);
});

test("maxSatisfying picks the highest matching version; invalid ranges throw", () => {
  assert.equal(maxSatisfying(["1.0.0", "1.4.2", "1.10.0", "2.0.0", "1.10.0-rc.1"], "^1.0.0"), "1.10.0");
  assert.equal(maxSatisfying(["1.0.0"], "^2"), null);
  assert.throws(() => satisfies("1.0.0", "latest"), /invalid version range "latest"/);
  assert.throws(() => satisfies("1.0.0", "^1 ||"), /empty alternative/);
});
