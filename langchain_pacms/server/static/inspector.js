// pacms inspector: loads a session, asks /select_debug, draws the keep/drop grid and the meter;
// shows recorded selections (a JSONL log, or a session followed live) read-only.
"use strict";
const $ = (id) => document.getElementById(id);
const KIND = { system: "S", memory: "M", turn: "T", tool: "X", document: "D" };
const DETAIL_HINT = "Click a cell (or focus it and press Enter) to see its text, tokens and scores.";
const MAX_RECORDS = 200;  // recorded selections the page keeps while following a session
const state = {
  session: null,      // a pool that can be re-selected (demo, request body), or null
  record: null,       // the recorded selection on screen (read-only), or null
  records: [],        // the records to pick from (a log file, or a followed session)
  total: 1, floor: 1, // the budget slider's scale (log, from floor to total tokens)
  generation: 0,      // bumped by every load and answer: late answers to old requests are dropped
  selected: null,     // {pane, id} of the cell whose detail is shown
  verdicts: { "pane-a": new Map(), "pane-b": new Map() },
  texts: new Map(),
  source: null,       // the EventSource of a followed session
};

function setStatus(text, kind) {
  const s = $("status");
  s.textContent = text;
  s.dataset.state = kind;
}

function drawn(text) {
  setStatus(text, "ready");
  $("status").dataset.generation = String(state.generation);
}

// -- the budget scale: the slider and the meters share it ----------------------------------------
function scale(tokens) {
  const lo = Math.log(state.floor), hi = Math.log(Math.max(state.total, state.floor + 1));
  return Math.min(1, Math.max(0, (Math.log(Math.max(tokens, 1)) - lo) / (hi - lo)));
}

function budgetFromSlider() {
  const v = Number($("budget").value) / 1000;
  const lo = Math.log(state.floor), hi = Math.log(Math.max(state.total, state.floor + 1));
  return Math.max(1, Math.round(Math.exp(lo + v * (hi - lo))));
}

function setScale(result) {
  const mandatory = result.candidates.filter((v) => v.mandatory).reduce((n, v) => n + v.tokens, 0);
  state.total = Math.max(1, result.tokens_total);
  state.floor = Math.max(1, Math.min(state.total, mandatory + 20, result.budget));
}

function showBudget(budget) {
  $("budget").value = String(Math.round(1000 * scale(budget)));
  $("budget-out").textContent = `${budget} tokens`;
}

function setEditable(editable, why) {
  for (const id of ["budget", "strategy", "compare"]) $(id).disabled = !editable;
  $("controls").dataset.readonly = editable ? "0" : "1";
  $("readonly-note").textContent = editable ? "" : why;
}

// -- loading: everything a previous load drew goes first ------------------------------------------
function clearAll() {
  state.generation += 1;
  state.session = null;
  state.record = null;
  state.records = [];
  state.selected = null;
  state.texts = new Map();
  for (const id of ["pane-a", "pane-b"]) {
    state.verdicts[id] = new Map();
    $(id).replaceChildren();
  }
  $("pane-b").hidden = true;
  $("query").textContent = "";
  $("options").textContent = "";
  $("record").hidden = true;
  $("record").replaceChildren();
  $("budget-out").textContent = "-";
  showDetail();
  setEditable(false, "");
}

function stopFollowing() {
  if (state.source) state.source.close();
  state.source = null;
  $("follow").value = "";
}

function failed(what, why) {
  clearAll();
  setStatus(`cannot load ${what}: ${why}`, "error");
}

// -- the request for a pool ------------------------------------------------------------------------
function ownStrategy() {
  return state.session.strategy || "pacms";
}

function requestFor(strategy, budget) {
  const s = state.session;
  const body = { candidates: s.candidates, query: s.query, strategy };
  if (strategy === ownStrategy() && s.strategy_options) body.strategy_options = s.strategy_options;
  if (s.relevant_ids) body.relevant_ids = s.relevant_ids;
  if (budget !== undefined) body.budget_tokens = budget;
  else if (s.budget_tokens !== undefined) body.budget_tokens = s.budget_tokens;
  else body.budget_ratio = s.budget_ratio ?? 0.015;
  return body;
}

async function post(body) {
  const r = await fetch("/select_debug", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await r.json().catch(() => ({ detail: `${r.status} ${r.statusText}` }));
  if (!r.ok) throw new Error(data.detail || r.statusText);
  return data;
}

function optionsLabel(strategy) {
  const opts = state.session && strategy === ownStrategy() && state.session.strategy_options;
  if (!opts || !Object.keys(opts).length) return "";
  return ` (${Object.entries(opts).map(([k, v]) => `${k}=${v}`).join(", ")})`;
}

// -- drawing ---------------------------------------------------------------------------------------
function meter(result) {
  const box = document.createElement("div");
  box.className = "meter";
  box.dataset.scale = "log";
  box.title = "log scale, as the budget slider";
  const bar = document.createElement("div");
  bar.className = "kept";
  bar.style.width = `${100 * scale(result.tokens_kept)}%`;
  const mark = document.createElement("div");
  mark.className = "budget";
  mark.style.left = `${100 * scale(result.budget)}%`;
  box.append(bar, mark);
  const text = document.createElement("div");
  text.className = "meter-text";
  text.dataset.kept = String(result.tokens_kept);
  text.dataset.budget = String(result.budget);
  text.textContent = `pooled ${result.tokens_total} · kept ${result.tokens_kept} · ` +
    `dropped ${result.tokens_dropped} · budget ${result.budget} tokens (log scale)`;
  return [box, text];
}

function cell(paneId, v, factIds) {
  const c = document.createElement("div");
  c.className = "cell" + (v.kept ? (v.mandatory ? " kept mandatory" : " kept") : "") +
    (factIds.has(v.id) ? " fact" : "");
  c.dataset.id = v.id;
  c.dataset.kept = v.kept ? "1" : "0";
  c.textContent = KIND[v.kind] || "?";
  c.tabIndex = 0;
  c.setAttribute("role", "button");
  c.title = `${v.id} (${v.kind}) ${v.kept ? "kept" : "dropped"} · ${v.tokens} tokens`;
  c.setAttribute("aria-label", c.title);
  const open = () => { state.selected = { pane: paneId, id: v.id }; showDetail(); };
  c.addEventListener("click", open);
  c.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); }
  });
  return c;
}

function render(paneId, result, title) {
  const pane = $(paneId);
  pane.replaceChildren();
  const kept = new Set(result.kept_ids);
  const h = document.createElement("h2");
  h.textContent = `${title}: kept ${kept.size}/${result.candidates.length}` +
    (result.fell_back ? " (fell back to recency)" : "") + (result.over_budget ? " (over budget)" : "");
  pane.append(h);
  const facts = (state.session && state.session.facts) || [];
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
  pane.append(...meter(result));
  const grid = document.createElement("div");
  grid.className = "grid";
  const factIds = new Set(facts.flatMap((f) => f.ids));
  state.verdicts[paneId] = new Map(result.candidates.map((v) => [v.id, v]));
  for (const v of result.candidates) grid.append(cell(paneId, v, factIds));
  pane.append(grid);
}

// The detail panel always shows the verdict the grid shows now (or the hint).
function showDetail() {
  document.querySelectorAll(".cell.selected").forEach((c) => c.classList.remove("selected"));
  const d = $("detail");
  const sel = state.selected;
  const v = sel && !$(sel.pane).hidden && state.verdicts[sel.pane].get(sel.id);
  if (!v) {
    state.selected = null;
    d.textContent = DETAIL_HINT;
    delete d.dataset.id;
    delete d.dataset.kept;
    return;
  }
  const c = $(sel.pane).querySelector(`.cell[data-id="${CSS.escape(v.id)}"]`);
  if (c) c.classList.add("selected");
  const gain = v.gain === null || v.gain === undefined ? "-" : v.gain.toFixed(4);
  const relevance = typeof v.relevance === "number" ? v.relevance.toFixed(4) : "-";
  d.dataset.id = v.id;
  d.dataset.kept = v.kept ? "1" : "0";
  d.textContent = `${v.id} · ${v.kind} · ${v.kept ? "KEPT" : "dropped"}` +
    `${v.mandatory ? " (mandatory)" : ""}\ntokens ${v.tokens} · relevance ${relevance} · ` +
    `gain ${gain} · pick rank ${v.pick_rank ?? "-"}\n\n` +
    (state.texts.get(v.id) ?? "(text not in this record)");
}

// -- a pool, re-selected live ------------------------------------------------------------------------
async function reselect(budget) {
  if (!state.session) return;
  const gen = ++state.generation;
  setStatus("selecting…", "busy");
  const a = $("strategy").value, b = $("compare").value;
  try {
    const [ra, rb] = await Promise.all([
      post(requestFor(a, budget)), b ? post(requestFor(b, budget)) : Promise.resolve(null),
    ]);
    if (gen !== state.generation) return;  // a newer request or load superseded this one
    if (budget === undefined) setScale(ra);
    showBudget(ra.budget);
    render("pane-a", ra, a + optionsLabel(a));
    $("pane-b").hidden = !rb;
    if (rb) render("pane-b", rb, b + optionsLabel(b));
    else state.verdicts["pane-b"] = new Map();
    showDetail();
    drawn(`${state.session.title || "session"}`);
  } catch (err) {
    if (gen !== state.generation) return;
    for (const id of ["pane-a", "pane-b"]) { $(id).replaceChildren(); state.verdicts[id] = new Map(); }
    showDetail();
    setStatus(`error: ${err.message}`, "error");
  }
}

function sessionProblem(data) {
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    return "the file is JSON but not a session (an object with 'candidates' and 'query')";
  }
  if (!Array.isArray(data.candidates)) return "a session needs 'candidates' (a list)";
  if (typeof data.query !== "string") return "a session needs 'query' (a string)";
  const bad = data.candidates.findIndex((c) => !c || typeof c.text !== "string");
  if (bad >= 0) return `candidates[${bad}] has no 'text'`;
  const strategies = [...$("strategy").options].map((o) => o.value);
  if (data.strategy !== undefined && data.strategy !== null && !strategies.includes(data.strategy)) {
    return `unknown strategy ${JSON.stringify(data.strategy)}`;
  }
  return null;
}

function useSession(session) {
  clearAll();
  state.session = session;
  state.texts = new Map(session.candidates.map((c, i) => [c.id ?? String(i), c.text]));
  $("strategy").value = ownStrategy();
  $("compare").value = "";
  setEditable(true, "");
  $("query").textContent = `query: ${session.query}`;
  const opts = session.strategy_options && Object.keys(session.strategy_options).length;
  $("options").textContent = opts ? `options for ${ownStrategy()}:${optionsLabel(ownStrategy())}` : "";
  return reselect(undefined);
}

// -- recorded selections (a log, or a followed session): shown as recorded, read-only ---------
function isRecord(r) {
  return r !== null && typeof r === "object" && Array.isArray(r.candidates) &&
    r.candidates.every((v) => v && typeof v.id === "string" && typeof v.kept === "boolean");
}

function recordLabel(r, i) {
  const kept = r.candidates.filter((v) => v.kept).length;
  return `#${i + 1} ${r.timestamp || ""} ${r.strategy || "?"} ${kept}/${r.candidates.length}`;
}

function showRecord(index, label) {
  const record = state.records[index];
  state.generation += 1;
  state.record = record;
  state.texts = new Map(Object.entries(record.texts || {}));
  const result = { ...record, kept_ids: record.candidates.filter((v) => v.kept).map((v) => v.id) };
  result.tokens_total ??= record.candidates.reduce((n, v) => n + v.tokens, 0);
  result.tokens_kept ??= record.candidates.filter((v) => v.kept).reduce((n, v) => n + v.tokens, 0);
  result.tokens_dropped ??= result.tokens_total - result.tokens_kept;
  setScale(result);
  showBudget(result.budget);
  const strategy = [...$("strategy").options].some((o) => o.value === record.strategy);
  $("strategy").value = strategy ? record.strategy : "";
  $("compare").value = "";
  setEditable(false, "recorded selection: budget and strategy are shown as recorded " +
    "(re-selecting needs the candidates' full texts, which a record does not hold)");
  $("query").textContent = `query: ${record.query || "?"}`;
  render("pane-a", result, `${record.strategy} (${record.source || "log"})`);
  $("pane-b").hidden = true;
  state.verdicts["pane-b"] = new Map();
  $("record").value = String(index);
  showDetail();
  drawn(`${label}: record ${index + 1} of ${state.records.length} ${record.timestamp || ""}`);
}

function listRecords() {
  const select = $("record");
  select.replaceChildren(...state.records.map((r, i) => new Option(recordLabel(r, i), String(i))));
  select.hidden = false;
}

function useRecords(records, label) {
  clearAll();
  state.records = records;
  listRecords();
  $("record").onchange = () => showRecord(Number($("record").value), label);
  showRecord(0, label);
}

// -- files -----------------------------------------------------------------------------------------
function parseLines(text) {
  const lines = text.split("\n").map((l, i) => [l, i + 1]).filter(([l]) => l.trim());
  const records = [];
  for (const [line, n] of lines) {
    let value;
    try { value = JSON.parse(line); } catch (err) { return { error: `line ${n} is not JSON (${err.message})` }; }
    if (!isRecord(value)) return { error: `line ${n} is not a selection record` };
    records.push(value);
  }
  return records.length ? { records } : { error: "the file is empty" };
}

async function loadFile(file) {
  stopFollowing();
  clearAll();
  const gen = state.generation;
  setStatus(`reading ${file.name}…`, "busy");
  let text;
  try { text = await file.text(); } catch (err) { return failed(file.name, err.message); }
  if (gen !== state.generation) return;  // another load started meanwhile
  let data;
  try {
    data = JSON.parse(text);
  } catch (whole) {
    const lines = text.trim().includes("\n") ? parseLines(text) : { error: `not JSON (${whole.message})` };
    if (lines.error) return failed(file.name, lines.error);
    return useRecords(lines.records, file.name);
  }
  if (isRecord(data)) return useRecords([data], file.name);
  const problem = sessionProblem(data);
  if (problem) return failed(file.name, problem);
  return useSession({ title: file.name, facts: [], ...data });
}

// -- live: follow a session's selections as the service serves them -----------------------------------
function follow(id) {
  stopFollowing();
  clearAll();
  if (!id) { setStatus("no session", "idle"); return; }
  if (![...$("follow").options].some((o) => o.value === id)) $("follow").append(new Option(id, id));
  $("follow").value = id;
  const label = `following ${id}`;
  setStatus(`${label}: waiting for its first selection…`, "busy");
  const source = new EventSource(`/sessions/${encodeURIComponent(id)}/events`);
  state.source = source;
  $("record").onchange = () => showRecord(Number($("record").value), label);
  source.addEventListener("selection", (e) => {
    if (state.source !== source) return;
    const record = JSON.parse(e.data);
    if (!isRecord(record)) return;
    const latest = !state.record || state.record === state.records[state.records.length - 1];
    state.records.push(record);
    if (state.records.length > MAX_RECORDS) state.records.shift();
    listRecords();
    if (latest) showRecord(state.records.length - 1, label);
    else $("record").value = String(state.records.indexOf(state.record));
  });
  source.onerror = () => {
    if (state.source === source) setStatus(`${label}: connection lost, retrying…`, "busy");
  };
}

async function refreshSessions() {
  const r = await fetch("/sessions");
  if (!r.ok) return;
  const current = $("follow").value;
  const ids = (await r.json()).sessions.map((s) => s.id);
  if (current && !ids.includes(current)) ids.push(current);
  $("follow").replaceChildren(new Option("(not following)", ""), ...ids.map((i) => new Option(i, i)));
  $("follow").value = current;
}

async function loadDemo() {
  stopFollowing();
  clearAll();
  const gen = state.generation;
  try {
    const demo = await (await fetch("/demo")).json();
    if (gen === state.generation) await useSession(demo);
  } catch (err) {
    if (gen === state.generation) failed("the demo", err.message);
  }
}

async function init() {
  const r = await fetch("/strategies");
  const names = (await r.json()).strategies.map((s) => s.name);
  for (const n of names) {
    $("strategy").append(new Option(n, n, n === "pacms", n === "pacms"));
    $("compare").append(new Option(n, n));
  }
  clearAll();
  $("load-demo").addEventListener("click", loadDemo);
  $("file").addEventListener("change", (e) => { if (e.target.files[0]) loadFile(e.target.files[0]); });
  $("budget").addEventListener("input", () => reselect(budgetFromSlider()));
  $("strategy").addEventListener("change", () => reselect(budgetFromSlider()));
  $("compare").addEventListener("change", () => reselect(budgetFromSlider()));
  $("follow").addEventListener("focus", refreshSessions);
  $("follow").addEventListener("change", () => follow($("follow").value));
  await refreshSessions();
  const wanted = new URLSearchParams(location.search).get("follow");
  if (wanted) follow(wanted);
}

init().catch((err) => setStatus(`error: ${err.message}`, "error"));
