// The costguard dashboard: polls the admin API of its own origin every
// two seconds and draws what it answers. No library, nothing fetched from
// elsewhere; the charts are SVG written here. The charts draw the history
// the server keeps (/admin/stats/history: the last 15 minutes, one sample
// per 10 seconds), read when the page opens and every 10 seconds after,
// so a page opened after an incident shows it. A figure is "–" until the
// server has answered it.
"use strict";

(function () {
  const POLL_MS = 2000;
  const HISTORY_EVERY = 5; // polls between two readings of the history
  const HISTORY = 90; // the server's samples: 15 minutes of 10 seconds
  const OUTCOMES = ["admitted", "rate_limited", "cost_exceeded", "unavailable", "shed", "shadow_rejected"];
  const COLORS = {
    admitted: "#2f855a", rate_limited: "#c53030", cost_exceeded: "#dd6b20", unavailable: "#6b46c1",
    shed: "#b7791f", shadow_rejected: "#718096", requested: "#2b6cb0", actual: "#38a169",
  };
  const SVGNS = "http://www.w3.org/2000/svg";
  let samples = null; // the last /admin/stats/history reading's samples
  let previous = null; // the last /admin/stats reading
  let updates = 0;
  let timer = 0, polling = false;

  const $ = (id) => document.getElementById(id);

  let typed = ""; // the token typed into this page, for a browser that keeps no storage

  function token() {
    try { return sessionStorage.getItem("costguard-admin-token") || typed; } catch (e) { return typed; }
  }

  async function get(path) {
    const headers = {};
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    const resp = await fetch(path, { headers: headers, cache: "no-store" });
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) {
      const msg = body && body.error ? body.error : resp.status + " " + resp.statusText;
      const err = new Error(path + ": " + msg);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  function text(id, v) { const el = $(id); if (el) el.textContent = String(v); }

  function fmt(n) {
    if (typeof n !== "number" || !isFinite(n)) return "–";
    if (Math.abs(n) >= 100 || Number.isInteger(n)) return Math.round(n).toLocaleString("en-US");
    return n.toFixed(2);
  }

  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c); else td.textContent = String(c);
      tr.appendChild(td);
    }
    return tr;
  }

  function fill(id, rows) {
    const tb = $(id);
    tb.replaceChildren(...rows);
  }

  function swatch(color, label) {
    const span = document.createElement("span");
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = color;
    span.append(sw, label);
    return span;
  }

  function el(name, attrs) {
    const e = document.createElementNS(SVGNS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  // lineChart draws series ({name: [values]}) over the same x positions,
  // the last value at the right edge, HISTORY values across.
  function lineChart(svg, series, unit, spanLabel) {
    const W = 600, H = 160, L = 44, B = 16, T = 8;
    let max = 0;
    for (const k in series) for (const v of series[k]) max = Math.max(max, v);
    if (max <= 0) max = 1;
    const nodes = [
      el("line", { x1: L, y1: H - B, x2: W, y2: H - B, class: "axis" }),
      el("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
    ];
    const top = el("text", { x: 2, y: T + 8 }); top.textContent = fmt(max) + unit; nodes.push(top);
    const zero = el("text", { x: 2, y: H - B }); zero.textContent = "0"; nodes.push(zero);
    const span = el("text", { x: L, y: H - 2 }); span.textContent = spanLabel; nodes.push(span);
    let legendX = L + 90;
    for (const k in series) {
      const vs = series[k];
      if (vs.some((v) => v > 0)) {
        const step = (W - 4 - L) / Math.max(HISTORY - 1, 1);
        const x0 = W - 4 - (vs.length - 1) * step;
        const pts = vs.map((v, i) => (x0 + i * step).toFixed(1) + "," + (H - B - (v / max) * (H - B - T)).toFixed(1));
        nodes.push(el("polyline", { points: pts.join(" "), fill: "none", stroke: COLORS[k] || "#000", "stroke-width": 1.5, "data-series": k }));
        if (vs.length === 1) { // one sample: a point, which a polyline does not show
          const [cx, cy] = pts[0].split(",");
          nodes.push(el("circle", { cx: cx, cy: cy, r: 2.5, fill: COLORS[k] || "#000" }));
        }
      }
      const lg = el("text", { x: legendX, y: H - 2 });
      lg.style.fill = COLORS[k] || "#000"; // CSSOM, which the page's CSP allows
      lg.textContent = k;
      nodes.push(lg);
      legendX += 8 + k.length * 6;
    }
    svg.replaceChildren(...nodes);
  }

  // showHistory draws the charts from the server's samples: decisions per
  // second by outcome, requested and actual points per second, each
  // sample's counts over the time it spans (at least a second: the first,
  // cut by the server's start, and the last, still running, may be short).
  function showHistory(h) {
    samples = h.samples;
    const dt = (x) => Math.max(1, (Date.parse(x.end) - Date.parse(x.start)) / 1000);
    const seen = new Set(["admitted"]);
    for (const x of samples) for (const o in x.decisions) seen.add(o);
    const shown = OUTCOMES.filter((o) => seen.has(o));
    for (const o of seen) if (!shown.includes(o)) shown.push(o);
    const series = {};
    for (const o of shown) series[o] = samples.map((x) => (x.decisions[o] || 0) / dt(x));
    const minutes = Math.max(1, Math.round(samples.length * h.interval_seconds / 60));
    const label = samples.length ? "last " + minutes + " min" : "no history yet";
    lineChart($("rate-chart"), series, "/s", label);
    lineChart($("points-chart"), {
      requested: samples.map((x) => x.requested_points / dt(x)),
      actual: samples.map((x) => x.actual_points / dt(x)),
    }, "/s", label);
    document.body.dataset.history = String(samples.length);
  }

  function showStats(s) {
    let total = 0, refused = 0;
    for (const o in s.decisions) {
      total += s.decisions[o];
      if (o !== "admitted") refused += s.decisions[o];
    }
    text("count-total", total);
    text("count-refused", refused);
    // Rates from two readings; "–" until there are two.
    let rates = null;
    const dt = previous ? (Date.parse(s.now) - Date.parse(previous.now)) / 1000 : 0;
    if (dt > 0) {
      rates = {};
      for (const o in s.decisions) rates[o] = (s.decisions[o] - (previous.decisions[o] || 0)) / dt;
    }
    previous = s;
    const shown = OUTCOMES.filter((o) => s.decisions[o] || o === "admitted");
    for (const o in s.decisions) if (!shown.includes(o)) shown.push(o);
    fill("outcomes", shown.map((o) => {
      const tr = row([swatch(COLORS[o] || "#000", o), s.decisions[o] || 0, rates ? fmt(rates[o] || 0) : "–"]);
      tr.id = "outcome-" + o;
      return tr;
    }));
    fill("refusals", s.refusals.length
      ? s.refusals.map((r) => row([r.code, r.plan, r.count]))
      : [row(["none", "", ""])]);
    text("requested-points", s.requested_points);
    text("actual-points", s.actual_points);
    text("actual-runs", s.actual_runs);
    text("breaker", s.breaker || "none (in-memory store)");
    text("fallbacks", s.fallbacks);
    const load = s.in_flight;
    text("inflight", load ? load.now : "–");
    text("inflight-peak", load ? load.peak : "–");
    text("capacity", load ? load.capacity : "–");
    fill("lanes", load && load.lanes.length
      ? load.lanes.map((ln) => {
        const tr = row([ln.lane || "(all)", ln.priority, ln.now, ln.shed_at]);
        tr.dataset.lane = ln.lane;
        if (ln.shed_at > 0 && load.now >= ln.shed_at) tr.className = "shedding";
        return tr;
      })
      : [row(["no load shedder", "", "", ""])]);
  }

  function showTop(top) {
    const all = [];
    for (const rep of top.reports) {
      for (const sp of rep.spenders.slice(0, 5)) all.push({ plan: rep.plan, principal: sp.principal, points: sp.points });
    }
    all.sort((x, y) => y.points - x.points); // stable: a tie keeps the first plan's spender first
    const best = all.length ? all[0] : null;
    fill("spenders", all.length ? all.map((x) => row([x.plan, x.principal, x.points])) : [row(["none yet", "", ""])]);
    text("top-principal", best ? best.principal : "–");
    text("top-plan", best ? best.plan : "–");
    text("top-points", best ? best.points : "–");
  }

  // poll reads the figures (and, on the first success and every
  // HISTORY_EVERY polls after, the history), then comes back in POLL_MS.
  // A poll asked while one runs (the token typed) is left to the next.
  async function poll() {
    if (polling) return;
    polling = true;
    clearTimeout(timer);
    const win = $("window").value;
    try {
      const withHistory = samples === null || updates % HISTORY_EVERY === 0;
      const [stats, top, hist] = await Promise.all([get("stats"), get("top?window=" + encodeURIComponent(win) + "&limit=10"),
        withHistory ? get("stats/history") : Promise.resolve(null)]);
      if (hist) showHistory(hist);
      showStats(stats);
      showTop(top);
      let ready = "–";
      try {
        const r = await fetch("../readyz", { cache: "no-store" });
        ready = r.ok ? "ready" : "not ready (" + r.status + ")";
      } catch (e) { ready = "unknown"; }
      text("ready", ready);
      updates++;
      document.body.dataset.updates = String(updates);
      const st = $("status");
      st.className = "status";
      st.textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      const st = $("status");
      st.className = "status error";
      st.textContent = e.status === 401 ? "a token is needed: type it on the right" : String(e.message || e);
    } finally {
      polling = false;
      timer = setTimeout(poll, POLL_MS);
    }
  }

  function showTimeline(recent) {
    const svg = $("timeline-chart");
    const W = 600, H = 160, L = 44, B = 16, T = 8;
    const nodes = [el("line", { x1: L, y1: H - B, x2: W, y2: H - B, class: "axis" })];
    if (!recent.length) {
      const t = el("text", { x: L + 8, y: H / 2 }); t.textContent = "no decisions in the last 15 minutes"; nodes.push(t);
      svg.replaceChildren(...nodes);
      return;
    }
    const end = Date.now(), start = end - 15 * 60 * 1000;
    // An admitted decision is drawn at its net points (what stays debited
    // once its refund and excess are settled), with its admission's charge
    // outlined above it: the gap is the refund. A refusal is drawn at the
    // points it asked for, in red.
    const admitted = (e) => e.outcome === "admitted" || e.outcome === "shadow_rejected";
    const net = (e) => (typeof e.net === "number" ? e.net : e.charged);
    const height = (e) => (admitted(e) ? net(e) : Math.max(net(e), e.requested));
    let max = 1;
    for (const e of recent) max = Math.max(max, height(e), e.charged);
    const top = el("text", { x: 2, y: T + 8 }); top.textContent = fmt(max) + " pts"; nodes.push(top);
    const left = el("text", { x: L, y: H - 2 }); left.textContent = "−15 min"; nodes.push(left);
    const right = el("text", { x: W - 24, y: H - 2 }); right.textContent = "now"; nodes.push(right);
    const y = (v) => (v / max) * (H - B - T);
    for (const e of recent) {
      const x = Math.max(L, L + ((Date.parse(e.time) - start) / (end - start)) * (W - L - 4)).toFixed(1);
      const h = Math.max(2, y(height(e)));
      const bar = el("rect", { x: x, y: (H - B - h).toFixed(1), width: 3, height: h.toFixed(1),
        fill: admitted(e) ? COLORS.admitted : COLORS.rate_limited, class: "decision" });
      bar.dataset.net = String(net(e));
      const tip = el("title", {});
      tip.textContent = e.time + " " + e.kind + " " + (e.operation || "") + " " + e.outcome + (e.code ? " " + e.code : "") +
        ": net " + fmt(net(e)) + " (charged " + fmt(e.charged) + (e.refunded ? ", refunded " + fmt(e.refunded) : "") +
        (e.excess ? ", excess " + fmt(e.excess) : "") + ")";
      bar.appendChild(tip);
      nodes.push(bar);
      if (admitted(e) && e.charged > net(e)) {
        const ch = Math.max(2, y(e.charged));
        const mark = el("rect", { x: x, y: (H - B - ch).toFixed(1), width: 3, height: (ch - h).toFixed(1), class: "charge" });
        mark.appendChild(tip.cloneNode(true));
        nodes.push(mark);
      }
    }
    svg.replaceChildren(...nodes);
  }

  async function lookUp(ev) {
    ev.preventDefault();
    const name = $("principal").value.trim();
    if (!name) return;
    const plan = $("principal-plan").value.trim();
    const errEl = $("principal-error");
    try {
      const p = await get("principals/" + encodeURIComponent(name) + (plan ? "?plan=" + encodeURIComponent(plan) : ""));
      errEl.hidden = true;
      $("principal-result").hidden = false;
      text("p-plan", p.plan);
      text("p-override", p.override ? JSON.stringify(p.override) : "none");
      fill("p-policies", (p.policies || []).map((x) => row([x.name, x.limit, x.remaining, x.reset_seconds])));
      showTimeline(p.recent || []);
    } catch (e) {
      $("principal-result").hidden = true;
      errEl.hidden = false;
      errEl.textContent = String(e.message || e);
    }
  }

  function start() {
    $("token").value = token();
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      typed = $("token").value.trim();
      try { sessionStorage.setItem("costguard-admin-token", typed); } catch (e) { /* storage off: the page keeps it until it is closed */ }
      poll(); // now, not at the next tick
    });
    $("principal-form").addEventListener("submit", lookUp);
    poll();
  }

  start();
})();
