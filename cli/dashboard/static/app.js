// The dashboard page: plain JS over the server's JSON API. The server pushes the overview by server-sent
// events; whenever it says something moved (or the run is live) the page re-reads what it shows. Each
// plotted series is also kept in window.__series[name] = [xs, ys], so a test can compare what is drawn with
// the run's record.

window.__series = {};
const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) k === "class" ? (e.className = v) : e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
};
const getJSON = (url) => fetch(url).then((r) => (r.ok ? r.json() : r.json().then((b) => Promise.reject(new Error(b.error || r.statusText)))));
const fmt = (x) =>
  typeof x === "number"
    ? Math.abs(x) >= 100 || Number.isInteger(x)
      ? String(Math.round(x * 100) / 100)
      : x.toFixed(3)
    : x === null || x === undefined
      ? "–"
      : String(x);
/** A loss with the digits a user compares (a replay's differences sit in the 5th to 7th). */
const fmtLoss = (x) => (typeof x === "number" && Number.isFinite(x) ? Number(x.toPrecision(7)).toString() : fmt(x));
/**
 * A recorded and a replayed figure, each with as many significant digits as it takes to see that they
 * differ (at least 7): two that print alike are equal.
 */
function fmtPair(a, b) {
  if (typeof a !== "number" || typeof b !== "number" || a === b) return [fmtLoss(a), fmtLoss(b)];
  let p = 7;
  while (p < 17 && a.toPrecision(p) === b.toPrecision(p)) p++;
  return [a.toPrecision(p), b.toPrecision(p)];
}
const pct = (x) => `${Math.round(x * 100)}%`;
const secs = (ms) => (ms >= 60_000 ? `${(ms / 60_000).toFixed(1)} min` : `${(ms / 1000).toFixed(1)} s`);
const mb = (b) => (b / 1e6).toFixed(2);
const row = (...cells) => el("tr", {}, ...cells.map((c) => (c instanceof Node && c.tagName === "TD" ? c : el("td", {}, c instanceof Node ? c : fmt(c)))));
const fillSelect = (select, values) => {
  const keep = select.value;
  select.replaceChildren(el("option", { value: "" }, "any"), ...values.map((v) => el("option", { value: v }, v)));
  select.value = values.map(String).includes(keep) ? keep : "";
};

// ---- overview, live through server-sent events
let lastMarks = "";
let lastOverview = null;
const clock = (iso) => new Date(iso).toLocaleTimeString();
/** What the header says about the run's server: nothing while it answers. */
function serverNote(o) {
  const s = o.server;
  if (s.state === "connected") return o.status === "done" || o.status === "failed" ? el("span", { id: "server" }, "run ended") : "";
  if (s.state === "not answering") return el("span", { id: "server", class: "bad" }, "server not answering: figures as last read");
  return el(
    "span",
    { id: "server", class: "bad" },
    `run ended: its server is gone (since ${clock(s.since)}); showing what was read until then — restart the dashboard to serve the stored run`,
  );
}
function showOverview(o) {
  if (o.error) return ($("#overview").textContent = o.error);
  lastOverview = o;
  $("#run").textContent = o.run;
  const h = o.health;
  const health = !h
    ? el("span", {}, "health: no heartbeats")
    : h.healthy
      ? el("span", { class: "good" }, "healthy")
      : el("span", { class: "bad" }, h.problems.join("; "));
  // During an SFT stage there is no run status and no policy version yet: the header shows the stage instead.
  const sft = o.sft && (o.phase === "sft" || o.steps === null) ? `SFT step ${o.sft.step} / ${o.sft.steps} · loss ${fmtLoss(o.sft.loss)}` : null;
  $("#overview").replaceChildren(
    o.status ? el("span", {}, `status ${o.status}`) : "",
    o.phase ? el("span", { id: "phase" }, `phase ${o.phase}`) : "",
    sft ? el("span", { id: "sft" }, sft) : "",
    o.steps !== null || !sft ? el("span", { id: "step" }, `step ${o.step}${o.steps ? ` / ${o.steps}` : ""}`) : "",
    o.etaSeconds !== null ? el("span", {}, `ETA ${secs(o.etaSeconds * 1000)}`) : "",
    el("span", {}, o.policyVersion === null ? "no policy published yet" : `policy v${o.policyVersion}`),
    el("span", {}, `checkpoint ${o.latestCheckpoint ?? "none"}`),
    el("span", {}, `groups ${o.groups}`),
    el("span", {}, `dead letters ${o.deadLetters}`),
    el("span", {}, o.environments.map((e) => e.id).join(", ")),
    o.server.state === "connected" ? health : "",
    serverNote(o),
  );
  document.body.dataset.server = o.server.state;
  // Re-read what moved; a live run's charts move every push (while its server answers), and a first read
  // still catching up is read again.
  const marks = JSON.stringify([o.marks, o.server.state]);
  if (marks !== lastMarks || o.reading || (o.status === "running" && o.server.state === "connected")) {
    lastMarks = marks;
    scheduleRefresh();
  }
}
new EventSource("/events").addEventListener("overview", (ev) => showOverview(JSON.parse(ev.data)));

// ---- charts
const charts = new Map();
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
function plot(name, title, xs, series, xLabel = "step") {
  window.__series[name] = [xs, series[0].values];
  let c = charts.get(name);
  const data = [xs, ...series.map((s) => s.values)];
  if (c && c.series.length === series.length + 1) return c.setData(data);
  if (c) {
    c.destroy();
    document.querySelector(`.chart[data-chart="${name}"]`)?.remove();
  }
  const box = el("div", { class: "chart", "data-chart": name }, el("h3", {}, title));
  $("#chart-grid").append(box);
  c = new uPlot(
    {
      width: 400,
      height: 180,
      scales: { x: { time: false } },
      // Small values (a learning rate, a KL) keep their significant digits on the axis.
      axes: [
        { label: xLabel, size: 36 },
        { size: 60, values: (_u, vals) => vals.map((v) => (v === 0 ? "0" : Number(v.toPrecision(5)).toString())) },
      ],
      series: [{ label: xLabel }, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], spanGaps: true }))],
    },
    data,
    box,
  );
  charts.set(name, c);
}

const LEARNER = [
  ["rewardMean", "reward (mean of the step's samples)"],
  ["passRate", "pass rate (training samples)"],
  ["loss", "loss"],
  ["entropy", "entropy"],
  ["mismatchKl", "mismatch KL (sampler vs learner)"],
  ["maskedFraction", "masked fraction"],
  ["gradNorm", "grad norm"],
  ["lr", "learning rate"],
  ["droppedStaleTotal", "stale samples dropped (total)"],
];

/** Values per step and label, averaged, from events carrying labels[key]. */
function byLabel(events, key, value) {
  const by = new Map();
  for (const e of events) {
    const label = e.labels?.[key] || "?";
    if (!by.has(label)) by.set(label, new Map());
    const m = by.get(label);
    const cur = m.get(e.step) || [0, 0];
    m.set(e.step, [cur[0] + (e.values[value] ?? 0), cur[1] + 1]);
  }
  const steps = [...new Set(events.map((e) => e.step))].sort((a, b) => a - b);
  return { steps, series: [...by].map(([label, m]) => ({ label, values: steps.map((s) => (m.has(s) ? m.get(s)[0] / m.get(s)[1] : null)) })) };
}

/** Sum of `value` per window of `windowMs`, as a rate per second, on a time axis from `t0`. */
function rate(events, value, t0, windowMs) {
  const sums = new Map();
  for (const e of events) {
    const w = Math.floor((e.time - t0) / windowMs);
    sums.set(w, (sums.get(w) ?? 0) + (e.values[value] ?? 0));
  }
  return sums;
}

async function refreshCharts() {
  const [learner, learnerEvents, reward, inference, evals, allResults, queues] = await Promise.all([
    getJSON("/api/steps"),
    getJSON("/api/metrics/learner"),
    getJSON("/api/metrics/reward"),
    getJSON("/api/metrics/inference"),
    getJSON("/api/evals"),
    getJSON("/api/eval/results"),
    getJSON("/api/queues"),
  ]);
  // The learner's StepRecords (rs.<run>.steps): typed fields, timings and the staleness tally's cells.
  const xs = learner.map((e) => e.step);
  const v = (key) => learner.map((e) => e[key] ?? null);
  const cellSum = (e, outcome, length) => e.cells.filter((c) => c.outcome === outcome && c.length === length).reduce((n, c) => n + c.count, 0);
  for (const [key, title] of LEARNER) plot(key, title, xs, [{ label: key, values: v(key) }]);
  plot("stalenessMean", "staleness (policy versions behind)", xs, [
    { label: "mean", values: v("stalenessMean") },
    { label: "max", values: v("stalenessMax") },
  ]);
  // What staleness costs, by completion length (quarters of maxTokens): a bias against long samples shows here.
  const lengthKeys = ["delayed", "droppedStale"].flatMap((o) => ["q1", "q2", "q3", "q4"].map((q) => [o, q]));
  const present = lengthKeys.filter(([o, q]) => learner.some((e) => cellSum(e, o, q) > 0));
  if (present.length)
    plot(
      "staleByLength",
      "delayed / dropped samples by completion length (quarter of maxTokens)",
      xs,
      present.map(([o, q]) => ({ label: `${o}.len.${q}`, values: learner.map((e) => cellSum(e, o, q)) })),
    );
  plot("stepTime", "step time breakdown (ms)", xs, [
    { label: "waiting for samples", values: learner.map((e) => e.timings.waitMs) },
    { label: "training", values: learner.map((e) => e.timings.trainMs) },
    { label: "publishing weights", values: learner.map((e) => e.timings.publishMs) },
  ]);
  // The SFT stage, from the learner's "sft" metrics events (its steps count from 1, apart from RL's).
  const sft = learnerEvents.filter((e) => e.kind === "sft");
  if (sft.length) {
    const sx = sft.map((e) => e.values.sftStep ?? e.step);
    plot("sftLoss", "SFT loss", sx, [{ label: "SFT loss", values: sft.map((e) => e.values.loss ?? null) }], "SFT step");
    plot("sftGradNorm", "SFT grad norm", sx, [{ label: "SFT grad norm", values: sft.map((e) => e.values.gradNorm ?? null) }], "SFT step");
  }
  // Reward and pass rate per environment, from the reward actor's group events.
  const groups = reward.filter((e) => e.kind === "group");
  if (groups.length) {
    const r = byLabel(groups, "env", "rewardMean");
    plot("rewardByEnv", "reward by environment (group means, by task step)", r.steps, r.series);
    const p = byLabel(groups, "env", "passRate");
    plot("passRateByEnv", "pass rate by environment (by task step)", p.steps, p.series);
  }
  // Tokens per second per actor, over 10 s windows of the run's clock.
  const tasks = inference.filter((e) => e.kind === "task");
  const trainedEvents = learner.map((e) => ({ time: e.time, values: { tokens: e.tokens } }));
  const all = [...tasks, ...trainedEvents];
  if (all.length) {
    const t0 = Math.min(...all.map((e) => e.time));
    // About 40 windows over the run so far, each 1 s to 1 min long.
    const span = Math.max(...all.map((e) => e.time)) - t0;
    const W = Math.min(60_000, Math.max(1000, Math.round(span / 40 / 1000) * 1000));
    const gen = rate(tasks, "generatedTokens", t0, W);
    const trained = rate(trainedEvents, "tokens", t0, W);
    const windows = [...new Set([...gen.keys(), ...trained.keys()])].sort((a, b) => a - b);
    plot(
      "tokensPerSec",
      `tokens/s per actor (${W / 1000} s windows)`,
      windows.map((w) => (w * W) / 1000),
      [
        { label: "inference (generated)", values: windows.map((w) => (gen.get(w) ?? 0) / (W / 1000)) },
        { label: "learner (trained)", values: windows.map((w) => (trained.get(w) ?? 0) / (W / 1000)) },
      ],
      "seconds",
    );
  }
  const versions = Object.keys(evals)
    .map(Number)
    .filter((x) => !evals[x].skipped)
    .sort((a, b) => a - b);
  if (versions.length) {
    // The eval split follows train's distribution; other splits (arithmetic's "hard") are drawn beside it, never in its place.
    const splits = [...new Set(versions.flatMap((x) => Object.keys(evals[x].splits ?? {})))].sort();
    plot(
      "evalPassAt1",
      "held-out pass@1 by policy version (greedy)",
      versions,
      [
        { label: "pass@1 (eval split)", values: versions.map((x) => evals[x].passAt1) },
        ...splits.map((sp) => ({ label: `pass@1 (${sp} split)`, values: versions.map((x) => evals[x].splits?.[sp]?.passAt1 ?? null) })),
      ],
      "version",
    );
  }
  const evalSplit = allResults.filter((r) => r.split === "eval");
  if (evalSplit.length) {
    const evalResults = evalSplit;
    const vs = [...new Set(evalResults.map((r) => r.version))].sort((a, b) => a - b);
    const envs = [...new Set(evalResults.map((r) => r.env))].sort();
    const at = (env, version) => evalResults.find((r) => r.env === env && r.version === version);
    plot(
      "evalPassAt1ByEnv",
      "held-out pass@1 per environment",
      vs,
      envs.map((env) => ({ label: env, values: vs.map((x) => at(env, x)?.passAt1 ?? null) })),
      "version",
    );
    const ks = [...new Set(evalResults.flatMap((r) => Object.keys(r.passAtK)))].sort();
    if (ks.length)
      plot(
        "evalPassAtK",
        "held-out pass@k per environment (sampled)",
        vs,
        envs.flatMap((env) => ks.map((k) => ({ label: `${env} ${k}`, values: vs.map((x) => at(env, x)?.passAtK[k] ?? null) }))),
        "version",
      );
  }
  if (queues.samples.length > 1) {
    const t0 = queues.samples[0].time;
    const names = [...new Set(queues.samples.flatMap((s) => Object.keys(s.depth)))].sort();
    plot(
      "queueDepth",
      "queue depth: pending + unacked per consumer (while watched)",
      queues.samples.map((s) => (s.time - t0) / 1000),
      names.map((n) => ({ label: n, values: queues.samples.map((s) => s.depth[n] ?? null) })),
      "seconds",
    );
  }
  showQueues(queues);
}

// ---- rollouts
let groupOffset = 0;
let groupTotal = 0;
const groupQuery = () => {
  const p = new URLSearchParams();
  for (const [k, val] of new FormData($("#group-filter"))) if (val !== "") p.set(k, String(val));
  p.set("limit", "100");
  p.set("offset", String(groupOffset));
  return p;
};
async function refreshGroups() {
  const query = groupQuery();
  const { groups, total } = await getJSON(`/api/groups?${query}`);
  groupTotal = total;
  $("#group-count").textContent =
    `${total} group${total === 1 ? "" : "s"}${total > 100 ? `, ${groupOffset + 1}–${Math.min(total, groupOffset + 100)} newest first` : ""}`;
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
        el("td", {}, fmt(g.rewardMean)),
        el("td", {}, g.rewardMin === null ? "–" : `${fmt(g.rewardMin)}–${fmt(g.rewardMax)}`),
      );
      tr.addEventListener("click", () => showGroup(g.seq));
      return tr;
    }),
  );
  if (lastOverview) fillSelect($("#group-filter [name=env]"), [...new Set(lastOverview.environments.map((e) => e.key))]);
  // Which query the list shows (a test waits on it).
  document.body.dataset.groups = query.toString();
}
$("#group-filter").addEventListener("submit", (e) => {
  e.preventDefault();
  groupOffset = 0;
  refreshGroups().catch(showError);
});
$("#groups-older").addEventListener("click", () => {
  if (groupOffset + 100 < groupTotal) groupOffset += 100;
  refreshGroups().catch(showError);
});
$("#groups-newer").addEventListener("click", () => {
  groupOffset = Math.max(0, groupOffset - 100);
  refreshGroups().catch(showError);
});

// Shading: by the sampler's logprob (darker = less likely: where the update pulls hardest), or, once the
// learner's logprobs are in, by the gap between the two (darker = larger |sampler − learner|, what the
// importance ratio and the loss's mask see).
function tokenView(tokens, learner) {
  return el(
    "div",
    { class: "tokens", "data-shading": learner ? "gap" : "sampler" },
    ...tokens.map((t, i) => {
      const lp = learner?.[i];
      const gap = lp === null || lp === undefined ? null : Math.abs(t.logprob - lp);
      const title = `id ${t.id}, ${t.mask ? "trained" : "masked (environment's)"}, sampler logprob ${t.logprob.toFixed(3)}${
        lp === null || lp === undefined ? "" : `, learner ${lp.toFixed(3)}, gap ${gap.toFixed(3)}`
      }`;
      const s = el("span", { class: t.mask ? "model" : "env", title }, t.text ?? `#${t.id}`);
      if (t.mask && learner && gap !== null) s.style.background = `rgba(148, 103, 189, ${Math.min(0.85, gap * 2).toFixed(2)})`;
      else if (t.mask) s.style.background = `rgba(214, 39, 40, ${Math.min(0.8, -t.logprob / 8).toFixed(2)})`;
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
        ` advantage ${fmt(r.advantage)} · ${r.stopReason}${r.isTruncated ? " (truncated)" : ""} · ${r.numTurns} turn(s) · v${r.policyVersionMin}${
          r.policyVersionMax !== r.policyVersionMin ? `–v${r.policyVersionMax}` : ""
        } · ${r.tokens.length} tokens`,
      ),
      el(
        "div",
        { class: "components" },
        Object.entries(r.rewardComponents)
          .map(([k, v]) => `${k} ${fmt(v)}`)
          .join(" · "),
      ),
      el(
        "div",
        { class: "metrics" },
        Object.entries(r.metrics)
          .map(([k, v]) => `${k} ${fmt(v)}`)
          .join(" · "),
      ),
      ...r.messages.map((m) => el("pre", { class: `msg ${m.role}` }, `${m.role}${m.name ? ` (${m.name})` : ""}: ${m.content}`)),
      r.errors.length ? el("div", { class: "bad" }, r.errors.join("; ")) : "",
      tokenView(r.tokens),
      el("div", { class: "hint learner-note" }, "learner logprobs: loading…"),
    ),
  );
  $("#group").replaceChildren(el("h3", {}, `group seq ${seq}: task ${g.rows[0]?.taskId ?? "?"}`), el("div", { class: "completions" }, ...cards));
  // The learner's logprobs, one completion at a time (each is a forward pass on the server).
  for (const [i, r] of g.rows.entries()) {
    const card = document.querySelector(`#group .completion[data-row="${i}"]`);
    if (!card || $("#group h3")?.textContent?.indexOf(`seq ${seq}:`) === -1) return;
    try {
      const l = await getJSON(`/api/groups/${seq}/learner?row=${i}`);
      card.querySelector(".tokens").replaceWith(tokenView(r.tokens, l.logprobs));
      const gaps = l.logprobs.map((x, j) => (x === null || !r.tokens[j].mask ? 0 : Math.abs(r.tokens[j].logprob - x)));
      card.querySelector(".learner-note").textContent =
        `shaded by |sampler − learner| logprob under weights v${l.version}; largest gap ${fmt(Math.max(0, ...gaps))}`;
    } catch (e) {
      card.querySelector(".learner-note").textContent = `shaded by the sampler's logprob (learner logprobs: ${e.message})`;
    }
  }
}

// ---- eval
async function refreshEval() {
  const results = await getJSON("/api/eval/results");
  $("#eval-results tbody").replaceChildren(
    ...[...results]
      .sort((a, b) => b.version - a.version || a.split.localeCompare(b.split) || a.env.localeCompare(b.env))
      .map((r) =>
        row(
          `v${r.version}`,
          r.split,
          r.env,
          r.n,
          r.passAt1,
          Object.entries(r.passAtK)
            .map(([k, x]) => `${k} ${fmt(x)}`)
            .join(" · "),
          r.rewardMean,
          r.seconds,
        ),
      ),
  );
  fillSelect(
    $("#eval-filter [name=version]"),
    [...new Set(results.map((r) => r.version))].sort((a, b) => b - a),
  );
  fillSelect($("#eval-filter [name=env]"), [...new Set(results.map((r) => r.env))].sort());
  fillSelect($("#eval-filter [name=split]"), [...new Set(results.map((r) => r.split))].sort());
  const p = new URLSearchParams();
  for (const [k, val] of new FormData($("#eval-filter"))) if (val !== "") p.set(k, String(val));
  p.set("limit", "200");
  const { samples, total } = await getJSON(`/api/eval/samples?${p}`);
  $("#eval-count").textContent = `${total} sample${total === 1 ? "" : "s"}${total > 200 ? " (newest 200)" : ""}`;
  $("#eval-samples tbody").replaceChildren(
    ...samples.map((s) => {
      const tr = row(s.seq, `v${s.version}`, s.split, s.env, s.exampleId, s.greedy ? "greedy" : s.sampleIndex, s.reward, s.stopReason);
      tr.className = "pick";
      tr.dataset.seq = s.seq;
      tr.addEventListener("click", () => showEvalSample(s.seq).catch(showError));
      return tr;
    }),
  );
}
$("#eval-filter").addEventListener("submit", (e) => {
  e.preventDefault();
  refreshEval().catch(showError);
});
async function showEvalSample(seq) {
  const s = await getJSON(`/api/eval/samples/${seq}`);
  $("#eval-sample").replaceChildren(
    el(
      "h3",
      {},
      `v${s.version} ${s.split === "eval" ? "" : `${s.split} split, `}${s.env} example ${s.exampleId} (${s.greedy ? "greedy" : `sample ${s.sampleIndex}`})`,
    ),
    el("div", {}, el("b", {}, `reward ${fmt(s.reward)}`), ` · ${s.stopReason} · ${s.completionTokens} tokens`),
    el(
      "div",
      {},
      Object.entries(s.components)
        .map(([k, v]) => `${k} ${fmt(v)}`)
        .join(" · "),
    ),
    ...s.messages.map((m) => el("pre", { class: `msg ${m.role}` }, `${m.role}${m.name ? ` (${m.name})` : ""}: ${m.content}`)),
    s.errors.length ? el("div", { class: "bad" }, s.errors.join("; ")) : "",
  );
}

// ---- health: heartbeats, idle ratios, queues
async function refreshHealth() {
  const { run, idle } = await getJSON("/api/health");
  $("#instances tbody").replaceChildren(
    ...run.instances.map((i) =>
      row(
        i.actor,
        i.instance,
        el("td", { class: i.verdict === "healthy" || i.verdict === "exited" ? "good" : "bad" }, i.verdict),
        i.reason,
        i.forMs === undefined ? "–" : secs(i.forMs),
        secs(i.heartbeatAgeMs),
        i.inFlight ?? "–",
        Object.entries(i.idleRatio ?? {})
          .map(([k, x]) => `${k} ${pct(x)}`)
          .join(", "),
        i.lastLog ? `${i.lastLog.level}: ${i.lastLog.msg}` : "",
      ),
    ),
  );
  $("#idle tbody").replaceChildren(
    ...idle.map((s) => {
      const total = s.busyMs + Object.values(s.waitMs).reduce((a, b) => a + b, 0);
      return row(
        s.actor,
        s.instances,
        pct(total > 0 ? s.busyMs / total : 0),
        Object.entries(s.idle)
          .sort((a, b) => b[1] - a[1])
          .map(([k, x]) => `${k} ${pct(x)}`)
          .join(", "),
      );
    }),
  );
}
function showQueues(q) {
  $("#consumers tbody").replaceChildren(
    ...q.consumers.map((c) =>
      row(c.stream, c.consumer, c.pending, c.ackPending, c.redelivered, c.oldest ? `seq ${c.oldest.seq}, ${secs(c.oldest.ageMs)} old` : "–"),
    ),
  );
  $("#streams tbody").replaceChildren(...q.streams.map((s) => row(s.name, s.messages, mb(s.bytes))));
}

// ---- checkpoints
async function refreshCheckpoints() {
  const c = await getJSON("/api/checkpoints");
  $("#ckpt-latest").textContent = `newest training state on disk: ${c.latest === null || c.latest < 0 ? "none" : `step ${c.latest}`}`;
  $("#states tbody").replaceChildren(...[...c.states].reverse().map((s) => row(s.step, s.object, mb(s.bytes), s.sha256.slice(0, 16), s.time)));
  $("#weights tbody").replaceChildren(...[...c.weights].reverse().map((w) => row(`v${w.version}`, w.step, w.phase, mb(w.bytes), w.time)));
}

// ---- dead letters
async function refreshDeadLetters() {
  const { items } = await getJSON("/api/deadletters?limit=200");
  $("#dlq tbody").replaceChildren(
    ...items.map((d) => {
      const tr = row(d.seq, d.reason, d.subject, d.originalSeq, d.actor, d.time);
      tr.className = "pick";
      tr.addEventListener("click", () => showDeadLetter(d).catch(showError));
      return tr;
    }),
  );
}
async function showDeadLetter(d) {
  const p = await getJSON(`/api/deadletters/${d.seq}`);
  $("#dlq-payload").replaceChildren(
    el("h3", {}, `dead letter seq ${d.seq}`),
    el("div", {}, `from ${d.subject} seq ${d.originalSeq} (${d.actor}): ${d.reason}`),
    el("div", {}, `${p.bytes} bytes${p.truncated ? ", first 512 shown" : ""}`),
    el("pre", { class: "payload" }, p.text),
    el("pre", { class: "payload hex" }, p.hex),
  );
}

// ---- replays
async function refreshReplays() {
  const sessions = await getJSON("/api/replays");
  if (!sessions.length) return;
  $("#replay-list").replaceChildren(
    ...sessions.map((s) =>
      el(
        "div",
        { class: "replay", "data-session": s.session },
        el("h3", {}, `replay of ${s.session}${s.setting ? ` with ${s.setting}` : " (as recorded)"}`),
        el(
          "table",
          {},
          el(
            "thead",
            {},
            el(
              "tr",
              {},
              ...[
                "step",
                "samples",
                "loss rec.",
                "loss replayed",
                "grad norm rec.",
                "replayed",
                "masked rec.",
                "replayed",
                "entropy rec.",
                "replayed",
                "verdict",
              ].map((h) => el("th", {}, h)),
            ),
          ),
          el(
            "tbody",
            {},
            ...s.steps.map((r) => {
              const verdict =
                r.exact === true
                  ? "bit-exact"
                  : r.exact === false
                    ? `differs: ${Number(r.maxRelDiff).toExponential(2)}${r.figure ? ` in ${r.figure}` : ""}${r.backendMatched === 0 ? " (other backend)" : ""}`
                    : "no record";
              const rec = r.recorded ?? {};
              return row(
                r.step,
                r.samples,
                ...["loss", "gradNorm", "maskedFraction", "entropy"].flatMap((k) => fmtPair(rec[k], r.replayed[k])),
                s.setting ? "–" : verdict,
              );
            }),
          ),
        ),
      ),
    ),
  );
}

// ---- tabs and refresh
const TABS = {
  charts: refreshCharts,
  rollouts: refreshGroups,
  eval: refreshEval,
  health: refreshHealth,
  checkpoints: refreshCheckpoints,
  deadletters: refreshDeadLetters,
  replays: refreshReplays,
};
let activeTab = "charts";
for (const b of document.querySelectorAll("nav button"))
  b.addEventListener("click", () => {
    for (const x of document.querySelectorAll("nav button, .tab")) x.classList.remove("active");
    b.classList.add("active");
    activeTab = b.dataset.tab;
    $(`#${activeTab}`).classList.add("active");
    document.body.dataset.tab = "";
    TABS[activeTab]()
      .then(() => (document.body.dataset.tab = activeTab))
      .catch(showError);
  });
function showError(e) {
  $("#overview").textContent = `error: ${e.message}`;
}
// One refresh at a time; a request during one runs once after it.
let running = null;
let again = false;
function scheduleRefresh() {
  if (running) {
    again = true;
    return;
  }
  running = (async () => {
    try {
      // The charts feed the overview's sense of progress; the open tab is what the user looks at.
      await Promise.all([refreshCharts(), activeTab === "charts" ? null : TABS[activeTab]()]);
      document.body.dataset.loaded = "1";
    } catch (e) {
      showError(e);
    } finally {
      running = null;
      if (again) {
        again = false;
        scheduleRefresh();
      }
    }
  })();
}
scheduleRefresh();
Promise.all([refreshGroups(), refreshDeadLetters()]).catch(showError);
