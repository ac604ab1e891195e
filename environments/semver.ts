/**
 * The subset of npm semver that environment pins need: versions MAJOR.MINOR.PATCH[-prerelease][+build]
 * and ranges made of exact versions, =, >, >=, <, <=, ^, ~, x-ranges (1.x, 1.2.*, 1), hyphen ranges
 * (1.2.3 - 2.0.0), space-separated AND and || OR. Prerelease versions only satisfy a range whose
 * comparator names the same MAJOR.MINOR.PATCH with a prerelease (npm's rule).
 */
export interface SemVer {
  major: number;
  minor: number;
  patch: number;
  prerelease: Array<string | number>;
  raw: string;
}

const VERSION_RE = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/;

export function parseVersion(v: string): SemVer | null {
  const m = VERSION_RE.exec(v.trim());
  if (!m) return null;
  const nums = [m[1], m[2], m[3]].map(Number) as [number, number, number];
  if (nums.some((n) => !Number.isSafeInteger(n))) return null;
  const prerelease = m[4] ? m[4].split(".").map((p) => (/^\d+$/.test(p) ? Number(p) : p)) : [];
  return { major: nums[0], minor: nums[1], patch: nums[2], prerelease, raw: v.trim() };
}

export function isValidVersion(v: string): boolean {
  return parseVersion(v) !== null;
}

export function compareVersions(a: SemVer, b: SemVer): number {
  if (a.major !== b.major) return a.major < b.major ? -1 : 1;
  if (a.minor !== b.minor) return a.minor < b.minor ? -1 : 1;
  if (a.patch !== b.patch) return a.patch < b.patch ? -1 : 1;
  // A version without prerelease is greater than the same version with one.
  if (a.prerelease.length === 0 && b.prerelease.length === 0) return 0;
  if (a.prerelease.length === 0) return 1;
  if (b.prerelease.length === 0) return -1;
  for (let i = 0; i < Math.max(a.prerelease.length, b.prerelease.length); i++) {
    const x = a.prerelease[i];
    const y = b.prerelease[i];
    if (x === undefined) return -1;
    if (y === undefined) return 1;
    if (x === y) continue;
    if (typeof x === "number" && typeof y === "number") return x < y ? -1 : 1;
    if (typeof x === "number") return -1; // numeric identifiers sort before alphanumeric ones
    if (typeof y === "number") return 1;
    return x < y ? -1 : 1;
  }
  return 0;
}

type Op = "<" | "<=" | ">" | ">=" | "=";
interface Comparator {
  op: Op;
  v: SemVer;
}
/** A comparator set: all must hold. An empty set matches every (non-prerelease) version. */
type ComparatorSet = Comparator[];

/** A partial version from a range: missing or x/X/* parts are undefined. */
interface Partial {
  major?: number;
  minor?: number;
  patch?: number;
  prerelease: Array<string | number>;
}

const PARTIAL_RE = /^v?(\d+|[xX*])(?:\.(\d+|[xX*])(?:\.(\d+|[xX*])(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?)?)?$/;

function parsePartial(s: string, range: string): Partial {
  const m = PARTIAL_RE.exec(s);
  if (!m) throw new Error(`invalid version range "${range}": cannot read "${s}"`);
  const num = (x: string | undefined) => (x === undefined || /^[xX*]$/.test(x) ? undefined : Number(x));
  const p: Partial = { major: num(m[1]), minor: num(m[2]), patch: num(m[3]), prerelease: [] };
  if (p.major === undefined) p.minor = p.patch = undefined;
  if (p.minor === undefined) p.patch = undefined;
  if (m[4]) p.prerelease = m[4].split(".").map((x) => (/^\d+$/.test(x) ? Number(x) : x));
  return p;
}

function ver(major: number, minor: number, patch: number, prerelease: Array<string | number> = []): SemVer {
  return { major, minor, patch, prerelease, raw: `${major}.${minor}.${patch}${prerelease.length ? "-" + prerelease.join(".") : ""}` };
}

const c = (op: Op, v: SemVer): Comparator => ({ op, v });

/** Expands one range token (^1.2, ~1, >=1.2, 1.x, 1.2.3) into plain comparators. */
function expand(op: string, p: Partial): ComparatorSet {
  const { major: M, minor: m, patch: pa, prerelease: pre } = p;
  if (M === undefined) return op === "<" || op === ">" ? [c("<", ver(0, 0, 0))] : [];
  const full = m !== undefined && pa !== undefined;
  switch (op) {
    case "^": {
      const lo = ver(M, m ?? 0, pa ?? 0, pre);
      if (M > 0 || m === undefined) return [c(">=", lo), c("<", ver(M + 1, 0, 0))];
      if (m > 0 || pa === undefined) return [c(">=", lo), c("<", ver(0, m + 1, 0))];
      return [c(">=", lo), c("<", ver(0, 0, pa + 1))];
    }
    case "~": {
      const lo = ver(M, m ?? 0, pa ?? 0, pre);
      return m === undefined ? [c(">=", lo), c("<", ver(M + 1, 0, 0))] : [c(">=", lo), c("<", ver(M, m + 1, 0))];
    }
    case "":
    case "=":
      if (full) return [c("=", ver(M, m, pa, pre))];
      return m === undefined ? [c(">=", ver(M, 0, 0)), c("<", ver(M + 1, 0, 0))] : [c(">=", ver(M, m, 0)), c("<", ver(M, m + 1, 0))];
    case ">=":
      return [c(">=", ver(M, m ?? 0, pa ?? 0, pre))];
    case "<":
      return [c("<", ver(M, m ?? 0, pa ?? 0, pre))];
    case ">":
      if (full) return [c(">", ver(M, m, pa, pre))];
      return [c(">=", m === undefined ? ver(M + 1, 0, 0) : ver(M, m + 1, 0))];
    case "<=":
      if (full) return [c("<=", ver(M, m, pa, pre))];
      return [c("<", m === undefined ? ver(M + 1, 0, 0) : ver(M, m + 1, 0))];
    default:
      throw new Error(`unknown range operator "${op}"`);
  }
}

export function parseRange(range: string): ComparatorSet[] {
  const text = range.trim();
  const sets: ComparatorSet[] = [];
  for (const alt of text === "" ? [""] : text.split("||")) {
    const part = alt.trim();
    if (part === "" && text !== "") throw new Error(`invalid version range "${range}": empty alternative`);
    const hyphen = /^(\S+)\s+-\s+(\S+)$/.exec(part);
    if (hyphen) {
      const lo = parsePartial(hyphen[1]!, range);
      const hi = parsePartial(hyphen[2]!, range);
      sets.push([...expand(">=", lo), ...(hi.major === undefined ? [] : expand("<=", hi))]);
      continue;
    }
    // Operators may be separated from their version by spaces (">= 1.2.3"): glue them first.
    const tokens = part.replace(/(<=|>=|<|>|=|\^|~)\s+/g, "$1").split(/\s+/).filter(Boolean);
    const set: ComparatorSet = [];
    for (const tok of tokens) {
      const m = /^(<=|>=|<|>|=|\^|~>?)?(.*)$/.exec(tok)!;
      const op = m[1] === "~>" ? "~" : (m[1] ?? "");
      set.push(...expand(op, parsePartial(m[2]!, range)));
    }
    sets.push(set);
  }
  return sets;
}

function test(cmp: Comparator, v: SemVer): boolean {
  const d = compareVersions(v, cmp.v);
  switch (cmp.op) {
    case "<": return d < 0;
    case "<=": return d <= 0;
    case ">": return d > 0;
    case ">=": return d >= 0;
    case "=": return d === 0;
  }
}

function setMatches(set: ComparatorSet, v: SemVer): boolean {
  if (!set.every((cmp) => test(cmp, v))) return false;
  if (v.prerelease.length === 0) return true;
  return set.some((cmp) => cmp.v.prerelease.length > 0 && cmp.v.major === v.major && cmp.v.minor === v.minor && cmp.v.patch === v.patch);
}

/** Does version satisfy range? Throws on an invalid range; an invalid version never satisfies. */
export function satisfies(version: string, range: string): boolean {
  const v = parseVersion(version);
  const sets = parseRange(range);
  return v !== null && sets.some((s) => setMatches(s, v));
}

/** The highest version that satisfies range, or null. */
export function maxSatisfying(versions: readonly string[], range: string): string | null {
  const sets = parseRange(range);
  let best: SemVer | null = null;
  for (const raw of versions) {
    const v = parseVersion(raw);
    if (v && sets.some((s) => setMatches(s, v)) && (!best || compareVersions(v, best) > 0)) best = v;
  }
  return best ? best.raw : null;
}
