// Group-relative advantages (DESIGN §4): A = r - mean(group), optionally divided by the group std. Shared by
// the reward actor (which computes them) and replay (which recomputes them under changed settings).
export function groupAdvantages(rewards: number[], normalize: boolean): number[] {
  const n = rewards.length;
  if (n === 0) return [];
  const mean = rewards.reduce((s, r) => s + r, 0) / n;
  const centred = rewards.map((r) => r - mean);
  if (!normalize) return centred;
  const std = Math.sqrt(centred.reduce((s, c) => s + c * c, 0) / n);
  // A group where everyone scored the same carries no signal: keep zeros rather than dividing by ~0.
  return std < 1e-6 ? centred.map(() => 0) : centred.map((c) => c / std);
}
