// The live page: it only reads what the controller sends (Server-Sent
// Events from package ui) and draws it. Every text from the cluster goes
// through textContent, never innerHTML: object names are not markup.
"use strict";

const $ = (id) => document.getElementById(id);
const MAX_TIMELINE = 300;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function clock(ms) {
  const d = new Date(ms);
  return d.toTimeString().slice(0, 8) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function dur(ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms / 60000) + " min";
}

// One line of the timeline per event.
function describe(it) {
  switch (it.kind) {
    case "state": return `${it.from} → ${it.to}: ${it.reason}` + (it.timeTravel ? " (time travel)" : "");
    case "page": return `LIST page ${it.page}: ${it.items} objects` + (it.more ? ", more to come" : `, list at RV ${it.rv}`);
    case "replaced": return `RELIST done at RV ${it.rv}: store holds ${it.size} (+${it.added} ~${it.updated} -${it.deleted})`;
    case "watch": return (it.initialEvents ? "WATCHLIST" : "WATCH") + ` from RV ${it.rv || "(any)"}, ends after ${it.timeoutS} s`;
    case "event": return `${it.type} ${it.key} @${it.rv}`;
    case "bookmark": return `BOOKMARK @${it.rv}` + (it.initialEventsEnd ? " (initial events end)" : "");
    case "ended": return (it.gone ? "410 GONE: " : "stream closed: ") + `${it.frames} frames in ${it.openS.toFixed(1)} s` + (it.err ? ` (${it.err})` : "");
    case "backoff": return `backing off ${dur(it.delayMs)} (${it.class})`;
    case "probe": return `PROBE: server at RV ${it.rv || "?"}` + (it.err ? ` (${it.err})` : "");
    case "skipped": return `SKIPPED ${it.key}: ${it.err}`;
    case "reconcile": return `reconcile ${it.key} on worker ${it.worker}: ` + (it.err ? `failed (${it.err}), retry in ${dur(it.retryMs)}` : `ok in ${it.tookMs.toFixed(1)} ms`);
    case "paused": return `PAUSE all workers ${dur(it.forMs)}: ${it.key} (${it.err})`;
    case "resync": return `resync: ${it.keys} keys queued`;
    case "leading": return it.leading ? "became the leader" : "stopped leading";
    case "leader": return `the leader is ${it.identity}`;
    default: return it.kind + " " + (it.type || "");
  }
}

function addItem(it) {
  const li = el("li", undefined, "k-" + it.kind);
  li.dataset.kind = it.kind;
  if (it.kind === "ended" && it.gone) li.classList.add("gone");
  if (it.kind === "reconcile" && it.err) li.classList.add("failed");
  if (it.key) li.dataset.key = it.key;
  li.append(el("span", clock(it.at), "t"), el("span", describe(it)));
  const tl = $("timeline");
  tl.prepend(li);
  while (tl.children.length > MAX_TIMELINE) tl.lastChild.remove();
  if (it.kind === "state") hotEdge(it.from + ">" + it.to);
}

function hotEdge(name) {
  document.querySelectorAll(".edge.hot").forEach((e) => e.classList.remove("hot"));
  const e = document.querySelector(`.edge[data-edge="${CSS.escape(name)}"]`);
  if (e) e.classList.add("hot");
}

function rows(tbody, list, cells) {
  tbody.replaceChildren(...list.map((x) => {
    const tr = el("tr");
    if (x.key) tr.dataset.key = x.key;
    for (const [text, cls] of cells(x)) tr.append(el("td", text, cls));
    return tr;
  }));
}

function draw(p) {
  $("state").textContent = p.state;
  document.querySelectorAll(".node").forEach((n) => n.classList.toggle("lit", n.dataset.state === p.state));
  $("rv").textContent = p.rv || "(none yet)";
  $("store").textContent = p.store;
  $("silence").textContent = dur(p.silenceMs);
  $("dropped").textContent = p.dropped;
  if (p.lastRelist) {
    const r = p.lastRelist, d = r.deltas;
    $("relist").textContent = `${r.first ? "first list" : "relist"} at RV ${r.rv}, ${clock(r.at)}: ${d.size} objects; +${d.added} added, ~${d.updated} updated, -${d.deleted} deleted`;
  }
  $("transitions").replaceChildren(...p.transitions.slice().reverse().map((t) => {
    const li = el("li");
    li.dataset.to = t.to;
    li.append(el("b", `${t.from} → ${t.to}`), el("span", " " + clock(t.at)), el("span", t.reason, "why"));
    return li;
  }));
  const q = p.queue || { ready: [], delayed: [], processing: [], readyLen: 0, delayedLen: 0 };
  $("readyLen").textContent = q.readyLen;
  $("delayedLen").textContent = q.delayedLen;
  $("processingLen").textContent = (q.processing || []).length;
  $("ready").replaceChildren(...(q.ready || []).map((k) => el("li", k)));
  rows($("delayed").tBodies[0], q.delayed || [], (d) => [[d.key], [dur(d.dueInMs), "num"], [String(d.retries), "num"]]);
  const workers = Object.entries(p.workers || {}).map(([w, h]) => ({ w, key: h.key, since: h.since }));
  rows($("workers").tBodies[0], workers, (h) => [[h.w, "num"], [h.key], [dur(p.now - h.since), "num"]]);
  rows($("reconciles").tBodies[0], (p.reconciles || []).slice().reverse(), (r) => [[r.key], [String(r.worker), "num"],
    [r.tookMs.toFixed(1) + " ms", "num"], r.err ? [`failed: ${r.err}; retry in ${dur(r.retryMs)}`, "failed"] : ["ok"]]);
  if (p.probe) {
    const s = (k) => (k in p.probe ? dur(p.probe[k] * 1000) : "…");
    $("probe").textContent = `last heartbeat: write → event ${s("event")} → store ${s("store")} → reconcile ${s("reconcile")}`;
  }
}

function connect() {
  const src = new EventSource("events");
  src.onopen = () => { $("conn").textContent = "live"; $("conn").className = "good"; };
  src.onerror = () => { $("conn").textContent = "reconnecting…"; $("conn").className = "bad"; };
  src.addEventListener("item", (m) => addItem(JSON.parse(m.data)));
  src.addEventListener("picture", (m) => draw(JSON.parse(m.data)));
  src.addEventListener("dropped", (m) => {
    const d = JSON.parse(m.data);
    const li = el("li", `… ${d.n} events missed (this page fell behind; ${d.total} in all)`, "gone");
    li.dataset.kind = "dropped";
    $("timeline").prepend(li);
  });
}
connect();
