// The dashboard page: plain JS over the server's JSON API. Each plotted series is also kept in
// window.__series[name] = [xs, ys], so a test can compare what is drawn with the run's record.

window.__series = {};
const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) k === "class" ? (e.className = v) : e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
};
const getJSON = (url) => fetch(url).then((r) => (r.ok ? r.json() : r.json().then((b) => Promise.reject(new Error(b.error || r.statusText)))));
const fmt = (x) => (typeof x === "number" ? (Math.abs(x) >= 100 || Number.isInteger(x) ? String(Math.round(x * 100) / 100) : x.toFixed(3)) : String(x));

// ---- overview, live through server-sent events
function showOverview(o) {
  if (o.error) return ($("#overview").textContent = o.error);
  $("#run").textContent = o.run;
  const h = o.health;
  const health = !h
    ? el("span", {}, "health: no heartbeats")
    : h.healthy
      ? el("span", { class: "good" }, "healthy")
      : el("span", { class: "bad" }, h.problems.join("; "));
  $("#overview").replaceChildren(
    el("span", {}, `status ${o.status ?? "?"}`),
    el("span", {}, `phase ${o.phase ?? "?"}`),
    el("span", { id: "step" }, `step ${o.step}${o.steps ? ` / ${o.steps}` : ""}`),
    el("span", {}, `policy v${o.policyVersion}`),
    el("span", {}, `groups ${o.groups}`),
    el("span", {}, `dead letters ${o.deadLetters}`),
    el("span", {}, o.environments.map((e) => e.id).join(", ")),
    health,
  );
}
new EventSource("/events").addEventListener("overview", (ev) => showOverview(JSON.parse(ev.data)));

// ---- charts
const charts = new Map();
function plot(name, title, xs, series) {
  window.__series[name] = [xs, series[0].values];
  let c = charts.get(name);
  const data = [xs, ...series.map((s) => s.values)];
  if (c) return c.setData(data);
  const box = el("div", { class: "chart", "data-chart": name }, el("h3", {}, title));
  $("#chart-grid").append(box);
  const colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
  c = new uPlot(
    {
      width: 400,
      height: 180,
      scales: { x: { time: false } },
      // Small values (a learning rate, a KL) keep their significant digits on the axis.
      axes: [{}, { size: 60, values: (_u, vals) => vals.map((v) => (v === 0 ? "0" : Number(v.toPrecision(3)).toString())) }],
      series: [{ label: "x" }, ...series.map((s, i) => ({ label: s.label, stroke: colors[i % colors.length] }))],
    },
    data,
    box,
  );
  charts.set(name, c);
}

const LEARNER = [
  ["rewardMean", "reward (mean of the step's samples)"],
  ["passRate", "pass rate"],
  ["loss", "loss"],
  ["entropy", "entropy"],
  ["mismatchKl", "mismatch KL (sampler vs learner)"],
  ["maskedFraction", "masked fraction"],
  ["gradNorm", "grad norm"],
  ["lr", "learning rate"],
  ["stalenessMean", "staleness (mean, versions)"],
  ["droppedStaleTotal", "stale samples dropped (total)"],
  ["tokensPerSec", "learner tokens/s"],
  ["stepMs", "train step time (ms)"],
];

async function refreshCharts() {
  const learner = (await getJSON("/api/metrics/learner")).filter((e) => e.kind === "step" && e.step !== undefined);
  const xs = learner.map((e) => e.step);
  for (const [key, title] of LEARNER) plot(key, title, xs, [{ label: key, values: learner.map((e) => e.values[key] ?? null) }]);
  // Reward per environment, from the reward actor's group events.
  const groups = (await getJSON("/api/metrics/reward")).filter((e) => e.kind === "group");
  const byEnv = new Map();
  for (const g of groups) {
    const env = g.labels?.env || "?";
    if (!byEnv.has(env)) byEnv.set(env, new Map());
    const m = byEnv.get(env);
    const cur = m.get(g.step) || [0, 0];
    m.set(g.step, [cur[0] + g.values.rewardMean, cur[1] + 1]);
  }
  const steps = [...new Set(groups.map((g) => g.step))].sort((a, b) => a - b);
  if (steps.length)
    plot(
      "rewardByEnv",
      "reward by environment (group means, by task step)",
      steps,
      [...byEnv].map(([env, m]) => ({ label: env, values: steps.map((s) => (m.has(s) ? m.get(s)[0] / m.get(s)[1] : null)) })),
    );
  const inference = (await getJSON("/api/metrics/inference")).filter((e) => e.kind === "task");
  if (inference.length)
    plot(
      "generatedTokens",
      "tokens generated per task",
      inference.map((_, i) => i),
      [{ label: "tokens", values: inference.map((e) => e.values.generatedTokens ?? 0) }],
    );
  const evals = await getJSON("/api/evals");
  const versions = Object.keys(evals)
    .map(Number)
    .sort((a, b) => a - b);
  if (versions.length)
    plot("evalPassAt1", "held-out pass@1 by policy version (greedy)", versions, [{ label: "pass@1", values: versions.map((v) => evals[v].passAt1) }]);
}

// ---- rollouts
async function refreshGroups() {
  const { groups } = await getJSON("/api/groups?limit=100");
  $("#groups tbody").replaceChildren(
    ...groups.map((g) => {
      const tr = el(
        "tr",
        { class: "pick", "data-seq": g.seq },
        el("td", {}, g.seq),
        el("td", {}, g.step),
        el("td", {}, g.env),
        el("td", {}, g.rows),
        el("td", {}, `v${g.policyVersion}`),
      );
      tr.addEventListener("click", () => showGroup(g.seq));
      return tr;
    }),
  );
}

function tokenView(tokens) {
  return el(
    "div",
    { class: "tokens" },
    ...tokens.map((t) => {
      const s = el("span", { class: t.mask ? "model" : "env", title: `id ${t.id}, logprob ${t.logprob.toFixed(3)}` }, t.text ?? `#${t.id}`);
      // Darker = less likely under the sampler: where the learner's update will pull hardest.
      if (t.mask) s.style.background = `rgba(214, 39, 40, ${Math.min(0.8, -t.logprob / 8).toFixed(2)})`;
      return s;
    }),
  );
}

async function showGroup(seq) {
  const g = await getJSON(`/api/groups/${seq}`);
  const cards = g.rows.map((r, i) =>
    el(
      "div",
      { class: "completion", "data-row": i },
      el(
        "div",
        {},
        el("b", {}, `#${i} reward ${fmt(r.reward)}`),
        ` advantage ${fmt(r.advantage)} · ${r.stopReason} · ${r.numTurns} turn(s) · v${r.policyVersionMin}`,
      ),
      el(
        "div",
        {},
        Object.entries(r.rewardComponents)
          .map(([k, v]) => `${k} ${fmt(v)}`)
          .join(" · "),
      ),
      el(
        "div",
        {},
        Object.entries(r.metrics)
          .map(([k, v]) => `${k} ${fmt(v)}`)
          .join(" · "),
      ),
      ...r.messages.map((m) => el("pre", { class: `msg ${m.role}` }, `${m.role}${m.name ? ` (${m.name})` : ""}: ${m.content}`)),
      r.errors.length ? el("div", { class: "bad" }, r.errors.join("; ")) : "",
      tokenView(r.tokens),
    ),
  );
  $("#group").replaceChildren(el("h3", {}, `group seq ${seq}: task ${g.rows[0]?.taskId ?? "?"}`), el("div", { class: "completions" }, ...cards));
}

// ---- dead letters
async function refreshDeadLetters() {
  const { items } = await getJSON("/api/deadletters?limit=200");
  $("#dlq tbody").replaceChildren(
    ...items.map((d) =>
      el(
        "tr",
        {},
        el("td", {}, d.seq),
        el("td", {}, d.reason),
        el("td", {}, d.subject),
        el("td", {}, d.originalSeq),
        el("td", {}, d.actor),
        el("td", {}, d.time),
      ),
    ),
  );
}

// ---- tabs and refresh
for (const b of document.querySelectorAll("nav button"))
  b.addEventListener("click", () => {
    for (const x of document.querySelectorAll("nav button, .tab")) x.classList.remove("active");
    b.classList.add("active");
    $(`#${b.dataset.tab}`).classList.add("active");
  });
async function refreshAll() {
  try {
    await Promise.all([refreshCharts(), refreshGroups(), refreshDeadLetters()]);
    document.body.dataset.loaded = "1";
  } catch (e) {
    $("#overview").textContent = `error: ${e.message}`;
  }
}
refreshAll();
setInterval(refreshAll, 5000);
