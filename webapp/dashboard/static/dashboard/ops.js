// Operator dashboards over time. Each page draws its plots from its data.json for the
// chosen range; the websocket says when something changed (the page re-reads, at most
// every RELOAD_MIN_MS), and on the utilisation page new telemetry samples are drawn as
// they arrive, without a reload.
"use strict";
(function () {
  const RELOAD_MIN_MS = 5000;
  const TELEMETRY_RELOAD_MS = 30000;
  const LIVE_POINTS = 300;
  const SHORT_RANGES = ["1h", "6h"];  // long ranges read hourly rollups: no reload per sample
  const page = document.body.dataset.page;
  const config = { displayModeBar: false, responsive: true };
  let range = new URLSearchParams(location.search).get("range") || (page === "node" ? "6h" : "24h");
  let lastLoad = 0;
  let reloadTimer = null;
  let data = null;
  const live = { traces: {}, count: 0 };

  // the page's language and the words the server chose (webapp/dashboard/strings.py)
  const S = JSON.parse(document.getElementById("strings").textContent);
  const t = (text) => S.text[text] || text;
  const w = (code) => (code === null || code === undefined ? "—" : S.words[code] || String(code).replace(/_/g, " "));
  const zoned = new Intl.DateTimeFormat(S.lang, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  const when = (v) => (v === null || v === undefined || v === "" ? "—" : zoned.format(new Date(v)));
  const time = (ms) => new Date(ms);
  const times = (list) => list.map(time);
  const pct = (v) => (v === null || v === undefined ? "—" : `${Math.round(v * 100)}%`);
  const layout = (title, extra) => Object.assign({
    title: { text: title }, margin: { t: 40, r: 20 }, legend: { orientation: "h" },
    xaxis: { type: "date", rangeslider: { visible: false } },
  }, extra || {});

  function rows(id, items, cells, cellClass) {
    const body = document.querySelector(`#${id} tbody`);
    if (!body) return;
    body.replaceChildren(...items.map((item) => {
      const tr = document.createElement("tr");
      cells(item).forEach((value, i) => {
        const td = document.createElement("td");
        td.textContent = value === null || value === undefined ? "—" : String(value);
        if (cellClass) td.className = cellClass(item, i) || "";
        tr.appendChild(td);
      });
      return tr;
    }));
  }

  const draw = {
    utilisation(d) {
      const traces = [];
      for (const [gen, s] of Object.entries(d.generations)) {
        traces.push({ type: "scatter", mode: "lines", name: `${gen} compute`, x: times(s.t), y: s.util });
        traces.push({ type: "scatter", mode: "lines", name: `${gen} memory bw`, x: times(s.t), y: s.mem,
          line: { dash: "dot" } });
      }
      Plotly.react("chart-generation", traces, layout(t("Utilisation per generation: compute and memory bandwidth"),
        { yaxis: { range: [0, 1], tickformat: ".0%" } }), config);
      const heat = (z, title, id) => Plotly.react(id, [{
        type: "heatmap", x: times(d.gpus.t), y: d.gpus.labels, z, zmin: 0, zmax: 1, colorscale: "Viridis",
        hoverongaps: false }], layout(t(title), { margin: { t: 40, l: 200 }, yaxis: { automargin: true } }), config);
      heat(d.gpus.util, "Compute utilisation per GPU", "chart-gpu-util");
      heat(d.gpus.mem, "Memory-bandwidth utilisation per GPU", "chart-gpu-mem");
      document.getElementById("thresholds").textContent =
        `(compute ≥ ${pct(d.thresholds.compute_min)} with memory bandwidth ≤ ${pct(d.thresholds.mem_bw_max)})`;
      rows("flags", d.flags, (f) => [f.gpu, when(f.t), pct(f.util), pct(f.mem)],
        (f, i) => (i >= 2 ? "flag" : ""));
      if (!document.querySelector("#chart-live .main-svg")) {
        Plotly.react("chart-live", [], layout(t("Compute per generation, newest samples"),
          { yaxis: { range: [0, 1], tickformat: ".0%" }, xaxis: { type: "date", visible: false },
            annotations: [{ text: t("waiting for the next samples…"), showarrow: false }] }), config);
      }
    },
    cost(d) {
      const bars = (groups) => Object.entries(groups).map(([name, s]) => (
        { type: "bar", name, x: times(s.t), y: s.micro.map((m) => m / 1e6) }));
      const quotes = Object.entries(d.quoted_by_tenant).map(([name, s]) => (
        { type: "scatter", mode: "markers", name: `${name} (quoted)`, x: times(s.t), y: s.micro.map((m) => m / 1e6) }));
      Plotly.react("chart-cost-tenant", bars(d.by_tenant).concat(quotes),
        layout(t("Billed by tenant: sum of bill line totals, with the quotes (currency units)"),
          { barmode: "stack" }), config);
      Plotly.react("chart-cost-generation", bars(d.by_generation),
        layout(t("Billed by generation: sum of bill line totals (currency units)"), { barmode: "stack" }), config);
      const kwh = (list) => list.map((mj) => mj / 3.6e9);
      Plotly.react("chart-energy", [
        { type: "bar", name: "attributed (planned, priced in the quote)", x: times(d.energy.t), y: kwh(d.energy.attributed_mj) },
        { type: "bar", name: "measured", x: times(d.energy.t), y: kwh(d.energy.measured_mj) },
      ], layout(t("Settled energy: attributed against measured (kWh)"), { barmode: "group" }), config);
    },
    ledger(d) {
      Plotly.react("chart-throughput", [
        { type: "scatter", mode: "lines+markers", name: "transactions/s", x: times(d.t), y: d.tx_per_s },
        { type: "scatter", mode: "lines+markers", name: "blocks/s", x: times(d.t), y: d.blocks_per_s },
      ], layout(t("Committed per second")), config);
      Plotly.react("chart-latency", Object.entries(d.latency_ms).map(([p, ys]) => (
        { type: "scatter", mode: "lines+markers", name: p, x: times(d.t), y: ys })),
        layout(t("Outbox-to-commit latency (ms)")), config);
      Plotly.react("chart-depth", [{ type: "scatter", mode: "lines", fill: "tozeroy", name: "waiting",
        x: times(d.depth.t), y: d.depth.waiting }], layout(t("Outbox depth (written, not yet committed)")), config);
      Plotly.react("chart-codes", [{ type: "bar", x: Object.keys(d.codes), y: Object.values(d.codes) }],
        layout(t("Validation codes"), { xaxis: { type: "category" } }), config);
      document.getElementById("pending-now").textContent = `${d.pending_now} entries waiting now.`;
    },
    capacity(d) {
      const h = d.heatmap;
      Plotly.react("chart-heatmap", [{ type: "heatmap", x: h.hours, y: h.weekdays, z: h.idle_share, zmin: 0, zmax: 1,
        colorscale: "YlOrRd", reversescale: true, hoverongaps: false }],
        layout(t("Idle capacity by hour of day and weekday (last 4 weeks)"),
          { xaxis: { type: "category", title: { text: "hour (UTC)" } } }), config);
      rows("advice", d.advice, (a) => [a.pool, w(a.action), a.replicas_now, a.replicas_advised,
        pct(a.mean_util), pct(a.mean_mem_util), a.reason]);
    },
    node(d) {
      const n = d.node;
      rows("node-facts", [["site", n.site], ["status", w(n.status)], ["trust", w(n.trust)], ["PCR policy", n.policy],
        ["last good quote", when(n.last_good_attestation)],
        ["not attested because", n.not_attested ? `${n.not_attested.code}: ${n.not_attested.detail}` : "(attested)"]], (r) => r);
      rows("events", d.events, (e) => [when(e.at), e.code, e.detail]);
      Plotly.react("chart-attestation", [{ type: "scatter", mode: "markers", x: d.timeline.t,
        y: d.timeline.valid.map((v) => (v ? "valid" : "failed")), text: d.timeline.reasons,
        marker: { color: d.timeline.valid.map((v) => (v ? "#1b6e32" : "#c0392b")), size: 9 } }],
        layout(t("Attestation timeline"), { yaxis: { type: "category", categoryarray: ["failed", "valid"] } }), config);
      rows("failed", d.failed, (f) => [when(f.at), f.reasons.map((r) => `${r.code}: ${r.detail}`).join("; "),
        f.differing_pcrs.map((p) => `${p.bank} PCR ${p.pcr}: expected ${p.expected.slice(0, 16)}…, measured ${p.measured.slice(0, 16)}…`).join("; ") || "none",
        f.on_ledger ? "yes" : "not yet"]);
      rows("gpus", d.gpus, (g) => [g.index, g.uuid, g.generation, g.lease, g.tenant]);
      Plotly.react("chart-power", [{ type: "scatter", mode: "lines", name: "mean W per GPU", x: times(d.power.t),
        y: d.power.watts }], layout(t("Power per GPU (W)")), config);
    },
  };

  async function load() {
    lastLoad = Date.now();
    const url = `${document.body.dataset.source}?range=${encodeURIComponent(range)}`;
    const response = await fetch(url, { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) return;
    data = await response.json();
    draw[page](data);
    document.body.dataset.loadedAt = String(lastLoad);
    document.body.dataset.drawnMs = String(performance.now());
  }

  function reloadSoon() {
    if (reloadTimer) return;
    reloadTimer = setTimeout(() => { reloadTimer = null; load(); },
      Math.max(0, RELOAD_MIN_MS - (Date.now() - lastLoad)));
  }

  // Telemetry samples pushed over the websocket: one point per generation and instant.
  function drawSamples(samples) {
    if (page !== "utilisation" || !data || !samples) return;
    const byKey = {};
    for (const [gpu, t, util] of samples) {
      const gen = data.gpu_generation[gpu];
      if (!gen) continue;
      const key = `${gen}|${t}`;
      (byKey[key] = byKey[key] || { gen, t, sum: 0, n: 0 });
      byKey[key].sum += util; byKey[key].n += 1;
    }
    const points = Object.values(byKey).sort((a, b) => a.t - b.t);
    for (const p of points) {
      if (!Object.keys(live.traces).length) {
        Plotly.relayout(t("chart-live"), { annotations: [], "xaxis.visible": true });
      }
      if (!(p.gen in live.traces)) {
        live.traces[p.gen] = Object.keys(live.traces).length;
        Plotly.addTraces("chart-live", { type: "scatter", mode: "lines+markers", name: p.gen, x: [], y: [] });
      }
      Plotly.extendTraces("chart-live", { x: [[time(p.t)]], y: [[p.sum / p.n / 100]] }, [live.traces[p.gen]], LIVE_POINTS);
    }
    if (points.length) {
      live.count += points.length;
      const newest = points[points.length - 1].t;
      // after the browser painted the new points: what bench/console_bench.py times
      requestAnimationFrame(() => {
        document.body.dataset.liveSampleT = String(newest);
        document.body.dataset.livePoints = String(live.count);
        window.dispatchEvent(new CustomEvent("wattlease:drawn", { detail: { t: newest, at: Date.now() } }));
      });
    }
  }

  function connect() {
    const badge = document.getElementById("live");
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws/dashboard/`);
    socket.onopen = () => { badge.textContent = t("live"); badge.classList.add("on"); };
    socket.onmessage = (message) => {
      const event = JSON.parse(message.data);
      if (event.kind === "telemetry") {
        drawSamples(event.payload.samples);
        // new samples are drawn as they come; the rest of a short range is re-read now and then
        if ((page === "utilisation" || page === "node") && SHORT_RANGES.includes(range)
            && Date.now() - lastLoad > TELEMETRY_RELOAD_MS) reloadSoon();
      } else if (page !== "capacity") {
        reloadSoon();
      }
    };
    socket.onclose = () => {
      badge.textContent = t("reconnecting…"); badge.classList.remove("on");
      setTimeout(connect, 3000);
    };
  }

  for (const button of document.querySelectorAll("[data-range]")) {
    button.classList.toggle("on", button.dataset.range === range);
    button.addEventListener("click", () => {
      range = button.dataset.range;
      for (const b of document.querySelectorAll("[data-range]")) b.classList.toggle("on", b === button);
      history.replaceState(null, "", `?range=${range}`);
      load();
    });
  }
  load().then(connect);
})();
