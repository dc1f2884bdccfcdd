// The dlscale dashboard: polls the token-protected /v1 routes and draws the nodes and the GPUs
// each job holds, the jobs, each live job's GPUs and batch over time, and the recent decisions
// with their reasons. Plain DOM, no library; every value from the server goes in as text.
"use strict";

const TOKEN_KEY = "dlscale-token";
const POLL_MS = 2000;
const MAX_TIMELINES = 12;
const TERMINAL = new Set(["succeeded", "failed", "cancelled", "dropped"]);
const SVG_NS = "http://www.w3.org/2000/svg";

let timer = null;
// Each login starts a new round of polling; answers of an older round are dropped.
let round = 0;

const $ = (selector) => document.querySelector(selector);

/**
 * An element with attributes (`class`, `title`, `data-*`, ...; `paint`: a job id whose colour
 * fills it) and children (nodes or text). Colours go through the CSSOM: the page's content
 * security policy refuses inline style attributes.
 */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "paint") e.style.background = colour(v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

/** A stable colour per job id: its FNV-1a hash spread over the hues by the golden ratio. */
function colour(id) {
  let h = 2166136261;
  for (const ch of id) h = Math.imul(h ^ ch.codePointAt(0), 16777619);
  const hue = Math.round((((h >>> 0) * 0.6180339887) % 1) * 360);
  return `hsl(${hue}, 60%, 64%)`;
}

/** What held a job back, in a few words (the full sentence is its tooltip). */
const LIMITS = {
  largest: "at its maximum",
  cooldown: "cooldown",
  finishing: "about to finish",
  shape: "shape rule",
  room: "no room on the nodes",
  "no-gain": "no speed-up",
  "min-gain": "minimum gain",
  "restart-cost": "restart cost",
  capacity: "GPUs worth more elsewhere",
  admission: "admission",
  fifo: "first come, first served",
  dropped: "dropped",
  unrunnable: "cannot run here",
  leaving: "being cancelled",
  policy: "the policy's rule",
};

const gpus = (n) => (n === 1 ? "1 GPU" : `${n} GPUs`);
const clock = (epochS) => new Date(epochS * 1000).toLocaleTimeString();
const rate = (v) => (v === null || v === undefined ? "–" : v >= 100 ? v.toFixed(0) : v.toFixed(1));
const percent = (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(0)} %`);

function age(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${String(Math.floor((s % 86400) / 3600)).padStart(2, "0")}h`;
}

class Refused extends Error {}

/** GET `path` with the token; a refused token throws `Refused` with the server's message. */
async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  const r = await fetch(path, { headers: { Authorization: `Bearer ${token}` }, cache: "no-store" });
  if (r.status === 401 || r.status === 403) {
    let message = r.statusText;
    try {
      message = (await r.json()).error;
    } catch (_) {
      // not JSON: keep the status text
    }
    throw new Refused(message);
  }
  if (!r.ok) {
    let message = `${r.status}`;
    try {
      message = `${r.status}: ${(await r.json()).error}`;
    } catch (_) {
      // not JSON: keep the status
    }
    throw new Error(`${path}: ${message}`);
  }
  return r.json();
}

function showLogin(error) {
  clearTimeout(timer);
  round += 1;
  sessionStorage.removeItem(TOKEN_KEY);
  $("#board").hidden = true;
  $("#logout").hidden = true;
  $("#summary").textContent = "";
  $("#status").textContent = "";
  $("#login-panel").hidden = false;
  $("#login-error").textContent = error || "";
  $("#token").value = "";
  $("#token").focus();
}

async function refresh(mine) {
  if (mine !== round) return;
  clearTimeout(timer);
  try {
    const [cluster, jobs, decisions] = await Promise.all([
      api("/v1/cluster"),
      api("/v1/jobs?all=true&limit=50"),
      api("/v1/decisions"),
    ]);
    const live = jobs.filter((j) => !TERMINAL.has(j.state)).sort((a, b) => a.submitted_at - b.submitted_at);
    const ended = jobs.filter((j) => TERMINAL.has(j.state)).slice(0, 10);
    const timelines = await Promise.all(
      live.slice(0, MAX_TIMELINES).map((j) =>
        api(`/v1/jobs/${encodeURIComponent(j.id)}/allocations`).then((allocations) => [j, allocations]),
      ),
    );
    if (mine !== round) return;
    const why = new Map(decisions.explanations.map((e) => [e.id, e]));
    const now = Date.now() / 1000;
    renderSummary(cluster, live);
    renderNodes(cluster);
    renderJobs(live.concat(ended), why, now);
    renderTimelines(timelines, now);
    renderDecisions(decisions);
    $("#login-panel").hidden = true;
    $("#board").hidden = false;
    $("#logout").hidden = false;
    $("#status").className = "";
    $("#status").textContent = `updated ${clock(now)}`;
  } catch (e) {
    if (mine !== round) return;
    if (e instanceof Refused) {
      showLogin(e.message);
      return;
    }
    $("#status").className = "error";
    $("#status").textContent = `cannot read the server: ${e.message}`;
  }
  timer = setTimeout(() => refresh(mine), POLL_MS);
}

function renderSummary(cluster, live) {
  const used = cluster.capacity - cluster.free;
  $("#summary").textContent =
    `${cluster.policy} · ${cluster.utility} · ${used} of ${gpus(cluster.capacity)} in use · ` +
    `${live.length} live job${live.length === 1 ? "" : "s"}` +
    (cluster.storage_error ? ` · database not writable: ${cluster.storage_error}` : "");
}

/** One GPU cell: which GPU, and the job holding it (or free, or held outside dlscale). */
function cell(name, job, other) {
  const attrs = { class: "gpu", title: job ? `${name}: ${job}` : name };
  if (job) {
    attrs["data-job"] = job;
    attrs.paint = job;
  } else {
    attrs.class += other ? " other" : " free";
  }
  return el("div", attrs, el("span", { class: "gpu-name" }, name), el("span", { class: "gpu-job" }, job || (other ? "other" : "free")));
}

function renderNodes(cluster) {
  const box = $("#nodes");
  box.replaceChildren();
  for (const node of cluster.nodes) {
    const cells = [];
    if (cluster.executor === "local" && cluster.slots.length > 0) {
      // One machine: the executor knows which device each job holds.
      const kind = cluster.gpus_detected ? "GPU" : "slot";
      for (const slot of cluster.slots) cells.push(cell(`${kind} ${slot}`, cluster.assigned[slot]));
    } else {
      let k = 0;
      for (const [job, n] of Object.entries(node.jobs)) {
        for (let i = 0; i < n; i += 1) cells.push(cell(`GPU ${k++}`, job));
      }
      while (k < node.gpus) cells.push(cell(`GPU ${k++}`));
      while (k < node.total_gpus) cells.push(cell(`GPU ${k++}`, null, true));
    }
    box.append(el("div", { class: "node", "data-node": node.name }, el("div", { class: "node-name" }, node.name), el("div", { class: "gpus" }, ...cells)));
  }
  if (cluster.nodes.length === 0) box.append(el("p", { class: "hint" }, "no usable GPUs"));
}

function renderJobs(jobs, why, now) {
  const body = $("#jobs tbody");
  body.replaceChildren();
  for (const j of jobs) {
    const e = why.get(j.id);
    const ended = TERMINAL.has(j.state);
    const limit = e?.explanation?.limit?.limit;
    const reason = ended ? j.message : limit ? LIMITS[limit] ?? limit : "";
    const nodes = j.nodes.map((s) => `${s.node}×${s.gpus}`).join(" + ");
    const batch = j.batch_size ? `${j.batch_size} (${j.local_batch_size}/GPU)` : "–";
    body.append(
      el(
        "tr",
        { "data-job": j.id, class: ended ? "ended" : "" },
        el("td", {}, el("span", { class: "swatch", paint: j.id }), j.id),
        el("td", { class: `state ${j.state}` }, j.state),
        el("td", { class: "num" }, j.gpus),
        el("td", {}, nodes || "–"),
        el("td", { class: "num" }, batch),
        el("td", { class: "num" }, rate(j.predicted_samples_per_s)),
        el("td", { class: "num" }, rate(j.samples_per_s)),
        el("td", { class: "num" }, percent(j.efficiency)),
        el("td", { class: "num" }, j.noise_scale == null ? "–" : Math.round(j.noise_scale)),
        el("td", { class: "num" }, j.restarts),
        el("td", { class: "num" }, age((j.finished_at ?? now) - j.submitted_at)),
        el("td", { class: "why", title: e ? e.summary : j.message }, reason),
      ),
    );
  }
  if (jobs.length === 0) body.append(el("tr", {}, el("td", { colspan: 12, class: "hint" }, "no jobs yet")));
}

/**
 * Each live job's launches as a step chart on one time axis (at most the last half hour) and
 * one GPU scale: width is time, height GPUs, labels GPUs × batch.
 */
function renderTimelines(timelines, now) {
  const box = $("#timelines");
  box.replaceChildren();
  // Drawn at the width it is shown at (text inside a stretched drawing would be distorted).
  const W = Math.max(300, (box.clientWidth || 820) - 20);
  const H = 60;
  const all = timelines.flatMap(([, allocations]) => allocations);
  const first = Math.min(now, ...timelines.map(([job]) => job.submitted_at), ...all.map((a) => a.at));
  const start = Math.max(first, now - 1800);
  const span = Math.max(now - start, 1);
  const most = Math.max(1, ...all.map((a) => a.gpus));
  const x = (t) => Math.min(Math.max(((t - start) / span) * W, 0), W);
  for (const [job, allocations] of timelines) {
    const chart = svg("svg", { width: W, height: H + 14, viewBox: `0 0 ${W} ${H + 14}`, role: "img" });
    chart.append(svg("line", { x1: 0, y1: H, x2: W, y2: H, class: "axis" }));
    for (const a of allocations) {
      const end = a.ended_at ?? now;
      if (end < start) continue;
      const h = (a.gpus / most) * (H - 4);
      const width = Math.max(x(end) - x(a.at), 1);
      const seg = svg("rect", {
        class: "seg",
        x: x(a.at),
        y: H - h,
        width,
        height: h,
        fill: colour(job.id),
        "data-gpus": a.gpus,
        "data-batch": a.batch_size,
        "data-attempt": a.attempt,
      });
      seg.append(svg("title", {}, `launch ${a.attempt}: ${gpus(a.gpus)}, batch ${a.batch_size}, ${clock(a.at)}–${a.ended_at ? clock(a.ended_at) : "now"}`));
      chart.append(seg);
      if (width > 40) chart.append(svg("text", { x: x(a.at) + 3, y: H - 3, class: "seg-label" }, `${a.gpus}×${a.batch_size}`));
    }
    chart.append(svg("text", { x: 0, y: H + 12, class: "tick" }, clock(start)));
    chart.append(svg("text", { x: W, y: H + 12, class: "tick end" }, "now"));
    box.append(
      el("div", { class: "timeline", "data-job": job.id }, el("div", { class: "timeline-name" }, job.id, el("span", { class: "hint" }, ` (full height: ${gpus(most)})`)), chart),
    );
  }
  if (timelines.length === 0) box.append(el("p", { class: "hint" }, "no live jobs"));
}

function renderDecisions(view) {
  const list = $("#decisions");
  list.replaceChildren();
  view.decisions.forEach((d, k) => {
    const item = el(
      "li",
      { class: "decision" },
      el("div", { class: "decision-head" }, el("time", {}, clock(d.at)), ` after ${d.trigger}: ${gpus(d.gpus)} of ${d.capacity} handed out`),
      el("ul", { class: "changes" }, ...d.changes.map((c) => el("li", {}, c))),
    );
    if (d.unchanged_after > 0) {
      const n = d.unchanged_after;
      item.append(el("div", { class: "hint" }, `then ${n} decision${n === 1 ? "" : "s"} that changed nothing, the last at ${clock(d.until)}`));
    }
    if (k === 0 && view.explanations.length > 0) {
      item.append(
        el("div", { class: "why-head" }, "why each job has what it has:"),
        el("ul", { class: "reasons" }, ...view.explanations.map((e) => el("li", { "data-job": e.id }, el("b", {}, e.id), `: ${e.summary}`))),
      );
    }
    list.append(item);
  });
  if (view.decisions.length === 0) list.append(el("li", { class: "hint" }, "no decision yet"));
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    $("#login-error").textContent = "";
    round += 1;
    refresh(round);
  });
  $("#logout").addEventListener("click", () => showLogin(""));
  if (sessionStorage.getItem(TOKEN_KEY)) {
    round += 1;
    refresh(round);
  } else {
    showLogin("");
  }
});
