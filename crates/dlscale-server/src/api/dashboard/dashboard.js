// The dlscale dashboard: polls the token-protected /v1 routes and draws the nodes and the GPUs
// each job holds, the jobs, each live job's GPUs and batch over time, and the recent decisions
// with their reasons. Plain DOM, no library; every value from the server goes in as text.
//
// It logs in once per session: the admin token goes to POST /v1/session in a JSON body, and
// the server answers with an HttpOnly cookie that this script never sees and that every later
// request (and a reload, or another tab) carries. The token is kept nowhere.
"use strict";

const POLL_MS = 2000;
const MAX_TIMELINES = 12;
const ENDED_PAGE = 10;
const DECISIONS_PAGE = 10;
const TERMINAL = new Set(["succeeded", "failed", "cancelled", "dropped"]);
const SVG_NS = "http://www.w3.org/2000/svg";
// Shows the server that this page sent a request (it refuses cookie-authenticated changes
// without it; another site's page cannot add it).
const CSRF = { "X-Dlscale-Csrf": "1" };

let timer = null;
// Each login starts a new round of polling; answers of an older round are dropped.
let round = 0;
// Whether the board has been shown since the last login form: a refusal then means that the
// session ended, and says so.
let shown = false;

const $ = (selector) => document.querySelector(selector);

/**
 * An element with attributes (`class`, `title`, `data-*`, ...; `paint`: a job id whose colour
 * fills it; `share`: its width, in per cent of its parent's) and children (nodes or text).
 * Colours and widths go through the CSSOM: the page's content security policy refuses inline
 * style attributes.
 */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "paint") e.style.background = colour(v);
    else if (k === "share") e.style.width = `${v}%`;
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

/**
 * The k-th colour: twelve hues 30° apart, in an order that puts far-apart hues next to each
 * other; past twelve, the same hues shifted and lighter or darker, so no two are the same.
 */
function paletteColour(k) {
  const ORDER = [0, 6, 3, 9, 1, 7, 4, 10, 2, 8, 5, 11];
  const LIGHTNESS = [64, 78, 52];
  const ring = Math.floor(k / ORDER.length);
  const hue = (ORDER[k % ORDER.length] * 30 + ring * 15) % 360;
  return `hsl(${hue}, 62%, ${LIGHTNESS[ring % LIGHTNESS.length]}%)`;
}

/**
 * Colours of the live jobs: each job takes the lowest palette entry no other live job holds,
 * in arrival order, and keeps it while it lives; so the live jobs never share a colour, and no
 * job's colour changes when another one ends.
 */
class Colours {
  constructor() {
    this.held = new Map();
  }

  /** Releases the colours of the jobs no longer live, then gives each new one its colour. */
  assign(liveIds) {
    const live = new Set(liveIds);
    for (const id of [...this.held.keys()]) if (!live.has(id)) this.held.delete(id);
    for (const id of liveIds) this.of(id);
  }

  /** The colour of job `id` (a job not yet seen takes the lowest free entry). */
  of(id) {
    if (!this.held.has(id)) {
      const taken = new Set(this.held.values());
      let k = 0;
      while (taken.has(k)) k += 1;
      this.held.set(id, k);
    }
    return paletteColour(this.held.get(id));
  }
}

const colours = new Colours();
const colour = (id) => colours.of(id);

/** Paging through older entries: the `before` of each page shown on the way, newest first. */
class Pager {
  constructor(name) {
    this.name = name;
    this.cursors = [null];
    // The `before` of the next older page, when the server says there is one.
    this.next = null;
  }

  get before() {
    return this.cursors[this.cursors.length - 1];
  }

  older() {
    if (this.next !== null) this.cursors.push(this.next);
  }

  newer() {
    if (this.cursors.length > 1) this.cursors.pop();
  }

  /** Shows its buttons: only when there is more than one page. */
  render() {
    const page = this.cursors.length;
    $(`#${this.name}-pager`).hidden = page === 1 && this.next === null;
    $(`#${this.name}-newer`).disabled = page === 1;
    $(`#${this.name}-older`).disabled = this.next === null;
    $(`#${this.name}-page`).textContent = `page ${page}`;
  }
}

let endedPager = new Pager("ended");
let decisionsPager = new Pager("decisions");

/** What held a job back, in a few words (the full sentence is its tooltip). */
const LIMITS = {
  largest: "at its maximum",
  cooldown: "cooldown",
  finishing: "about to finish",
  "until-periodic": "until the next periodic decision",
  shape: "shape rule",
  room: "no room on the nodes",
  "no-gain": "no speed-up",
  "min-gain": "minimum gain",
  "restart-cost": "restart cost",
  capacity: "GPUs worth more elsewhere",
  admission: "admission",
  fifo: "first come, first served",
  "team-max": "its team's maximum",
  guarantees: "other teams' guarantees",
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

/**
 * `method` `path` with the session cookie (and a JSON `body`, if given); the response. A
 * refusal throws `Refused` with the server's message, another failure an `Error`.
 */
async function request(method, path, body) {
  const init = { method, headers: { ...CSRF }, cache: "no-store", credentials: "same-origin" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
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
  return r;
}

/** GET `path`: its JSON. */
async function api(path) {
  return (await request("GET", path)).json();
}

/** A query's `before=` of a pager's page (nothing on the newest page). */
const before = (pager) => (pager.before === null ? "" : `&before=${encodeURIComponent(pager.before)}`);

function showLogin(error) {
  clearTimeout(timer);
  round += 1;
  shown = false;
  endedPager = new Pager("ended");
  decisionsPager = new Pager("decisions");
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
    const [cluster, teams, live, endedPage, decisions] = await Promise.all([
      api("/v1/cluster"),
      api("/v1/teams"),
      api("/v1/jobs"),
      request("GET", `/v1/jobs?ended=true&limit=${ENDED_PAGE}${before(endedPager)}`),
      api(`/v1/decisions?limit=${DECISIONS_PAGE}${before(decisionsPager)}`),
    ]);
    const ended = await endedPage.json();
    const timelines = await Promise.all(
      live.slice(0, MAX_TIMELINES).map((j) =>
        api(`/v1/jobs/${encodeURIComponent(j.id)}/allocations`).then((allocations) => [j, allocations]),
      ),
    );
    if (mine !== round) return;
    endedPager.next = endedPage.headers.get("X-Next-Before");
    decisionsPager.next = decisions.older ?? null;
    colours.assign(live.map((j) => j.id));
    const why = new Map(decisions.explanations.map((e) => [e.id, e]));
    const now = Date.now() / 1000;
    renderSummary(cluster, live);
    renderNodes(cluster);
    renderTeams(teams, cluster.capacity);
    renderJobs(live.concat(ended), why, now, typed(cluster));
    endedPager.render();
    renderTimelines(timelines, now);
    renderDecisions(decisions, decisionsPager.before === null);
    decisionsPager.render();
    shown = true;
    $("#login-panel").hidden = true;
    $("#board").hidden = false;
    $("#logout").hidden = false;
    $("#status").className = "";
    $("#status").textContent = `updated ${clock(now)}`;
  } catch (e) {
    if (mine !== round) return;
    if (e instanceof Refused) {
      // Before the board was shown, a refusal only means that there is no session yet.
      showLogin(shown ? "the session has ended: log in again" : "");
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

/** Whether some node names its GPU type: then nodes and jobs show theirs. */
const typed = (cluster) => cluster.nodes.some((n) => n.gpu_type);

function renderNodes(cluster) {
  const box = $("#nodes");
  box.replaceChildren();
  for (const node of cluster.nodes) {
    const cells = [];
    if (cluster.slots.length > 0) {
      // One machine (the local executor): the executor knows which device each job holds.
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
    const kind = node.gpu_type ? el("span", { class: "node-type" }, node.gpu_type) : null;
    box.append(
      el(
        "div",
        { class: "node", "data-node": node.name, "data-gpu-type": node.gpu_type },
        el("div", { class: "node-name" }, node.name, kind),
        el("div", { class: "gpus" }, ...cells),
      ),
    );
  }
  if (cluster.nodes.length === 0) box.append(el("p", { class: "hint" }, "no usable GPUs"));
}

/**
 * A bar per team on the cluster's scale: what it holds within its guarantee, what it borrows
 * beyond it, what of its guarantee other teams hold (lent), and what of it is idle.
 */
function renderTeams(teams, capacity) {
  $("#teams-section").hidden = teams.length === 0;
  const box = $("#teams");
  box.replaceChildren();
  const scale = Math.max(capacity, ...teams.map((t) => Math.max(t.gpus, t.guaranteed_gpus)), 1);
  for (const t of teams) {
    const own = Math.min(t.gpus, t.guaranteed_gpus);
    const idle = Math.max(0, t.guaranteed_gpus - own - t.lent_gpus);
    const segments = [["own", own], ["borrowed", t.borrowed_gpus], ["lent", t.lent_gpus], ["idle", idle]]
      .filter(([, n]) => n > 0)
      .map(([kind, n]) => el("span", { class: `seg ${kind}`, share: (100 * n) / scale, title: `${kind}: ${gpus(n)}` }));
    const facts = [`${gpus(t.gpus)} held of ${t.guaranteed_gpus} guaranteed`];
    if (t.max_gpus !== null) facts.push(`at most ${t.max_gpus}`);
    if (t.borrowed_gpus > 0) facts.push(`${t.borrowed_gpus} borrowed`);
    if (t.lent_gpus > 0) facts.push(`${t.lent_gpus} lent`);
    if (t.jobs_waiting > 0) facts.push(`${t.jobs_waiting} waiting`);
    if (t.fair_share !== null) facts.push(`fair share ${t.fair_share.toFixed(2)}`);
    box.append(
      el(
        "div",
        { class: "team", "data-team": t.team, "data-gpus": t.gpus, "data-borrowed": t.borrowed_gpus, "data-lent": t.lent_gpus },
        el("div", { class: "team-name" }, t.team),
        el("div", { class: "team-bar" }, ...segments),
        el("div", { class: "team-facts" }, facts.join(" · ")),
      ),
    );
  }
}

/** The jobs table; with `typed`, a column of the GPU type each job's launch runs on. */
function renderJobs(jobs, why, now, typed) {
  $("#type-head").hidden = !typed;
  const body = $("#jobs tbody");
  body.replaceChildren();
  for (const j of jobs) {
    const e = why.get(j.id);
    const ended = TERMINAL.has(j.state);
    const limit = e?.explanation?.limit?.limit;
    const reasons = ended ? [j.message] : [limit ? LIMITS[limit] ?? limit : ""];
    if (j.waiting_until != null) reasons.push(`waiting until ${clock(j.waiting_until)}`);
    const reason = reasons.filter((r) => r).join(" · ");
    const about = [e ? e.summary : j.message, j.waiting ? `waits: ${j.waiting}` : ""].filter((t) => t).join("\n");
    const nodes = j.nodes.map((s) => `${s.node}×${s.gpus}`).join(" + ");
    // What runs; a batch decided in place but not taken by the workers yet follows an arrow.
    const pending = j.pending_batch_size == null ? "" : ` → ${j.pending_batch_size} (pending since ${clock(j.pending_since)})`;
    const batch = j.batch_size ? `${j.batch_size} (${j.local_batch_size}/GPU)${pending}` : "–";
    body.append(
      el(
        "tr",
        { "data-job": j.id, class: ended ? "ended" : "" },
        el("td", { class: "job" }, ended ? null : el("span", { class: "swatch", paint: j.id }), j.id),
        el("td", { class: "job-team" }, j.team ?? "default"),
        el("td", { class: "job-user" }, j.owner ?? "admin"),
        el("td", { class: `state ${j.state}` }, j.state),
        el("td", { class: "num" }, j.gpus),
        typed ? el("td", { class: "job-type" }, j.gpu_type ?? "–") : null,
        el("td", {}, nodes || "–"),
        el("td", { class: "num" }, batch),
        el("td", { class: "num" }, rate(j.predicted_samples_per_s)),
        el("td", { class: "num" }, rate(j.samples_per_s)),
        el("td", { class: "num" }, percent(j.efficiency)),
        el("td", { class: "num" }, j.noise_scale == null ? "–" : Math.round(j.noise_scale)),
        el("td", { class: "num" }, j.restarts),
        el("td", { class: "num" }, age((j.finished_at ?? now) - j.submitted_at)),
        el("td", { class: "why", title: about }, reason),
      ),
    );
  }
  if (jobs.length === 0) body.append(el("tr", {}, el("td", { colspan: typed ? 15 : 14, class: "hint" }, "no jobs yet")));
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

/** The decisions of `view` (one page); with the reasons of the last one on the newest page. */
function renderDecisions(view, newest) {
  const list = $("#decisions");
  list.replaceChildren();
  view.decisions.forEach((d, k) => {
    const item = el(
      "li",
      { class: "decision", "data-at": d.at },
      el("div", { class: "decision-head" }, el("time", {}, clock(d.at)), ` after ${d.trigger}: ${gpus(d.gpus)} of ${d.capacity} handed out`),
      el("ul", { class: "changes" }, ...d.changes.map((c) => el("li", {}, c))),
    );
    if (d.unchanged_after > 0) {
      const n = d.unchanged_after;
      item.append(el("div", { class: "hint" }, `then ${n} decision${n === 1 ? "" : "s"} that changed nothing, the last at ${clock(d.until)}`));
    }
    if (k === 0 && newest && view.explanations.length > 0) {
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
  const again = () => {
    round += 1;
    refresh(round);
  };
  $("#login").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = $("#token").value.trim();
    $("#token").value = "";
    $("#login-error").textContent = "";
    try {
      await request("POST", "/v1/session", { token });
      again();
    } catch (e) {
      showLogin(e.message);
    }
  });
  $("#logout").addEventListener("click", async () => {
    try {
      await request("DELETE", "/v1/session");
      showLogin("");
    } catch (e) {
      $("#status").className = "error";
      $("#status").textContent = `cannot log out: ${e.message}`;
    }
  });
  for (const [pager, name] of [[() => endedPager, "ended"], [() => decisionsPager, "decisions"]]) {
    $(`#${name}-older`).addEventListener("click", () => {
      pager().older();
      again();
    });
    $(`#${name}-newer`).addEventListener("click", () => {
      pager().newer();
      again();
    });
  }
  // A session cookie from an earlier login shows the board at once; without one, the login.
  again();
});
