// pacms inspector: loads a session, asks /select_debug, draws the keep/drop grid and the meter.
"use strict";
const $ = (id) => document.getElementById(id);
const KIND = { system: "S", memory: "M", turn: "T", tool: "X", document: "D" };
const state = { session: null, total: 0, floor: 1, generation: 0, live: false };

function setStatus(text, kind) {
  const s = $("status");
  s.textContent = text;
  s.dataset.state = kind;
}

function budgetFromSlider() {
  const v = Number($("budget").value) / 1000;
  const lo = Math.log(state.floor), hi = Math.log(Math.max(state.total, state.floor + 1));
  return Math.max(1, Math.round(Math.exp(lo + v * (hi - lo))));
}

function sliderFromBudget(budget) {
  const lo = Math.log(state.floor), hi = Math.log(Math.max(state.total, state.floor + 1));
  $("budget").value = String(Math.round((1000 * (Math.log(budget) - lo)) / (hi - lo)));
}

async function post(body) {
  const r = await fetch("/select_debug", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await r.json();
  if (!r.ok) throw new Error(data.detail || r.statusText);
  return data;
}

function requestFor(strategy, budget) {
  const s = state.session;
  const body = { candidates: s.candidates, query: s.query, strategy };
  if (budget === undefined) body.budget_ratio = s.budget_ratio || 0.015;
  else body.budget_tokens = budget;
  return body;
}

function render(pane, result, title) {
  pane.replaceChildren();
  const h = document.createElement("h2");
  h.textContent = `${title}: kept ${result.kept_ids.length}/${result.candidates.length}` +
    (result.fell_back ? " (fell back to recency)" : "") + (result.over_budget ? " (over budget)" : "");
  pane.append(h);
  const kept = new Set(result.kept_ids);
  const facts = state.session.facts || [];
  if (facts.length) {
    const line = document.createElement("div");
    line.className = "facts";
    for (const f of facts) {
      const ok = f.ids.some((id) => kept.has(id));
      const span = document.createElement("span");
      span.className = "fact " + (ok ? "kept" : "lost");
      span.dataset.fact = f.name;
      span.dataset.kept = ok ? "1" : "0";
      span.textContent = `${f.name}: ${ok ? "kept" : "lost"}`;
      line.append(span);
    }
    pane.append(line);
  }
  const meter = document.createElement("div");
  meter.className = "meter";
  const total = Math.max(result.tokens_total, 1);
  const bar = document.createElement("div");
  bar.className = "kept";
  bar.style.width = `${(100 * result.tokens_kept) / total}%`;
  const mark = document.createElement("div");
  mark.className = "budget";
  mark.style.left = `${Math.min(100, (100 * result.budget) / total)}%`;
  meter.append(bar, mark);
  const text = document.createElement("div");
  text.className = "meter-text";
  text.dataset.kept = String(result.tokens_kept);
  text.dataset.budget = String(result.budget);
  text.textContent = `pooled ${result.tokens_total} · kept ${result.tokens_kept} · ` +
    `dropped ${result.tokens_dropped} · budget ${result.budget} tokens`;
  pane.append(meter, text);
  const grid = document.createElement("div");
  grid.className = "grid";
  const factIds = new Set(facts.flatMap((f) => f.ids));
  const texts = new Map((state.session.candidates || []).map((c, i) => [c.id ?? String(i), c.text]));
  for (const v of result.candidates) {
    const cell = document.createElement("div");
    cell.className = "cell" + (v.kept ? (v.mandatory ? " kept mandatory" : " kept") : "") +
      (factIds.has(v.id) ? " fact" : "");
    cell.dataset.id = v.id;
    cell.dataset.kept = v.kept ? "1" : "0";
    cell.textContent = KIND[v.kind] || "?";
    const gain = v.gain === null || v.gain === undefined ? "-" : v.gain.toFixed(4);
    cell.title = `${v.id} (${v.kind}) ${v.kept ? "kept" : "dropped"} · ${v.tokens} tokens`;
    cell.addEventListener("click", () => {
      document.querySelectorAll(".cell.selected").forEach((c) => c.classList.remove("selected"));
      cell.classList.add("selected");
      $("detail").textContent = `${v.id} · ${v.kind} · ${v.kept ? "KEPT" : "dropped"}` +
        `${v.mandatory ? " (mandatory)" : ""}\ntokens ${v.tokens} · relevance ` +
        `${v.relevance.toFixed(4)} · gain ${gain} · pick rank ${v.pick_rank ?? "-"}\n\n` +
        (texts.get(v.id) ?? "(text not in this record)");
    });
    grid.append(cell);
  }
  pane.append(grid);
}

async function reselect(budget) {
  if (!state.live) return;
  const gen = ++state.generation;
  setStatus("selecting…", "busy");
  const a = $("strategy").value, b = $("compare").value;
  try {
    const [ra, rb] = await Promise.all([
      post(requestFor(a, budget)), b ? post(requestFor(b, budget)) : Promise.resolve(null),
    ]);
    if (gen !== state.generation) return;  // a newer request superseded this one
    state.total = ra.tokens_total;
    state.floor = Math.max(1, Math.min(ra.tokens_total, 20 +
      ra.candidates.filter((v) => v.mandatory).reduce((n, v) => n + v.tokens, 0)));
    if (budget === undefined) sliderFromBudget(ra.budget);
    $("budget-out").textContent = `${ra.budget} tokens`;
    render($("pane-a"), ra, a);
    $("pane-b").hidden = !rb;
    if (rb) render($("pane-b"), rb, b);
    setStatus(`${state.session.title || "session"}`, "ready");
    $("status").dataset.generation = String(gen);
  } catch (err) {
    if (gen === state.generation) setStatus(`error: ${err.message}`, "error");
  }
}

function useSession(session) {
  state.session = session;
  state.live = true;
  $("query").textContent = `query: ${session.query}`;
  reselect(undefined);
}

function showRecord(record) {
  state.session = { title: "log record", query: record.query || "", candidates: [], facts: [] };
  state.live = false;
  $("query").textContent = `query: ${record.query || "?"} (from the log: re-selection needs ` +
    "the candidates' texts, which the log does not hold)";
  $("budget-out").textContent = `${record.budget} tokens`;
  record.kept_ids = record.candidates.filter((v) => v.kept).map((v) => v.id);
  render($("pane-a"), record, `${record.strategy} (${record.source || "log"})`);
  $("pane-b").hidden = true;
  setStatus(`log record ${record.timestamp || ""}`, "ready");
}

async function loadFile(file) {
  const text = await file.text();
  const select = $("record");
  select.hidden = true;
  try {
    const data = JSON.parse(text);
    if (!Array.isArray(data.candidates) || typeof data.query !== "string") {
      throw new Error("a session file needs 'candidates' and 'query'");
    }
    useSession({ title: file.name, facts: [], ...data });
  } catch (whole) {
    const records = text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
    if (!records.length || !records.every((r) => Array.isArray(r.candidates))) {
      setStatus(`cannot read ${file.name}: ${whole.message}`, "error");
      return;
    }
    select.replaceChildren(...records.map((r, i) => {
      const o = document.createElement("option");
      o.value = String(i);
      o.textContent = `#${i + 1} ${r.timestamp || ""} ${r.strategy} ${r.kept}/${r.candidates.length}`;
      return o;
    }));
    select.hidden = false;
    select.onchange = () => showRecord(records[Number(select.value)]);
    showRecord(records[0]);
  }
}

async function init() {
  const r = await fetch("/strategies");
  const names = (await r.json()).strategies.map((s) => s.name);
  for (const n of names) {
    $("strategy").append(new Option(n, n, n === "pacms", n === "pacms"));
    $("compare").append(new Option(n, n));
  }
  $("load-demo").addEventListener("click", async () => {
    const demo = await (await fetch("/demo")).json();
    useSession(demo);
  });
  $("file").addEventListener("change", (e) => { if (e.target.files[0]) loadFile(e.target.files[0]); });
  $("budget").addEventListener("input", () => reselect(budgetFromSlider()));
  $("strategy").addEventListener("change", () => reselect(budgetFromSlider()));
  $("compare").addEventListener("change", () => reselect(budgetFromSlider()));
}

init().catch((err) => setStatus(`error: ${err.message}`, "error"));
