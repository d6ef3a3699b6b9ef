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
  let poolPage = Number(new URLSearchParams(location.search).get("page")) || 1;
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
        if (value && typeof value === "object" && value.href) {  // a cell that leads down a level
          const a = document.createElement("a");
          a.href = value.href;
          a.textContent = String(value.text);
          td.appendChild(a);
        } else {
          td.textContent = value === null || value === undefined ? "—" : String(value);
        }
        if (cellClass) td.className = cellClass(item, i) || "";
        tr.appendChild(td);
      });
      return tr;
    }));
  }

  const here = (path) => new URL(path, location.href).pathname;
  const money = (micro) => (micro / 1e6).toLocaleString(S.lang, { maximumFractionDigits: 2 });
  const kw = (watts) => (watts === null || watts === undefined ? "—" : (watts / 1000).toLocaleString(S.lang, { maximumFractionDigits: 1 }));
  const trustCounts = (d) => {
    document.getElementById("trust-counts").textContent = Object.entries(d.nodes_by_trust)
      .map(([k, n]) => `${w(k)}: ${n}`).join(" · ");
  };
  // one row per site, generation or pool: inventory now, usage and bills over the range
  const groupRows = (id, items, href) => rows(id, items, (r) => [href ? { text: r.name, href: href(r) } : r.name,
    r.gpus, r.leased, r.quarantined, r.free, r.nodes, r.gpus_by_trust.trusted,
    r.gpus_by_trust.failed + r.gpus_by_trust.stale, pct(r.util), pct(r.mem), kw(r.power_w),
    r.energy_kwh.toLocaleString(S.lang), money(r.billed_micro)]);
  const lines = (id, groups, title) => {
    const traces = [];
    for (const [name, s] of Object.entries(groups)) {
      traces.push({ type: "scatter", mode: "lines", name: `${name} compute`, x: times(s.t), y: s.util });
      traces.push({ type: "scatter", mode: "lines", name: `${name} memory bw`, x: times(s.t), y: s.mem,
        line: { dash: "dot" } });
    }
    Plotly.react(id, traces, layout(title, { yaxis: { range: [0, 1], tickformat: ".0%" } }), config);
  };
  const heat = (id, h, z, title) => Plotly.react(id, [{
    type: "heatmap", x: times(h.t), y: h.labels, z, zmin: 0, zmax: 1, colorscale: "Viridis",
    hoverongaps: false }], layout(title, { margin: { t: 40, l: 160 }, yaxis: { automargin: true } }), config);

  const draw = {
    fleet(d) {
      trustCounts(d);
      groupRows("sites", d.sites, (r) => here(`../sites/${encodeURIComponent(r.name)}/`));
      groupRows("generations", d.generations);
      lines("chart-fleet-generations", d.series.generations, t("Utilisation per generation: compute and memory bandwidth"));
      lines("chart-fleet-sites", d.series.sites, t("Utilisation per site: compute and memory bandwidth"));
    },
    site(d) {
      trustCounts(d);
      groupRows("pools", d.pools, (r) => here(`pools/${encodeURIComponent(r.name)}/`));
      lines("chart-site-pools", d.series.pools, t("Utilisation per pool: compute and memory bandwidth"));
    },
    pool(d) {
      document.getElementById("page-note").textContent = `${d.page} / ${d.pages} (${d.node_count})`;
      document.getElementById("page-prev").disabled = d.page <= 1;
      document.getElementById("page-next").disabled = d.page >= d.pages;
      rows("pool-nodes", d.nodes, (n) => [{ text: n.name, href: here(`../../../../nodes/${encodeURIComponent(n.name)}/`) },
        w(n.status), w(n.trust), n.gpus, n.leased, pct(n.util), pct(n.mem), n.power_w]);
      heat("chart-node-util", d.heat, d.heat.util, t("Compute utilisation per node"));
      heat("chart-node-mem", d.heat, d.heat.mem, t("Memory-bandwidth utilisation per node"));
    },
    gpu(d) {
      const g = d.gpu;
      rows("gpu-facts", [["UUID", g.uuid], ["node", g.node], ["site", g.site], ["generation", g.generation],
        ["trust", w(g.trust)], ["lease", g.lease], ["tenant", g.tenant]], (r) => r);
      Plotly.react("chart-gpu-lines", [
        { type: "scatter", mode: "lines", name: "compute", x: times(d.t), y: d.util },
        { type: "scatter", mode: "lines", name: "memory bw", x: times(d.t), y: d.mem, line: { dash: "dot" } },
      ], layout(t("Compute and memory-bandwidth utilisation"), { yaxis: { range: [0, 1], tickformat: ".0%" } }), config);
      Plotly.react("chart-gpu-power", [{ type: "scatter", mode: "lines", name: "W", x: times(d.t), y: d.power_w }],
        layout(t("Power per GPU (W)")), config);
      Plotly.react("chart-gpu-temp", [{ type: "scatter", mode: "lines", name: "°C", x: times(d.t), y: d.temp_max }],
        layout(t("Hottest reading (°C)")), config);
    },
    utilisation(d) {
      const traces = [];
      for (const [gen, s] of Object.entries(d.generations)) {
        traces.push({ type: "scatter", mode: "lines", name: `${gen} compute`, x: times(s.t), y: s.util });
        traces.push({ type: "scatter", mode: "lines", name: `${gen} memory bw`, x: times(s.t), y: s.mem,
          line: { dash: "dot" } });
      }
      Plotly.react("chart-generation", traces, layout(t("Utilisation per generation: compute and memory bandwidth"),
        { yaxis: { range: [0, 1], tickformat: ".0%" } }), config);
      lines("chart-site", d.sites, t("Utilisation per site: compute and memory bandwidth"));
      document.getElementById("thresholds").textContent =
        `(compute ≥ ${pct(d.thresholds.compute_min)} with memory bandwidth ≤ ${pct(d.thresholds.mem_bw_max)})`;
      rows("flags", d.flags, (f) => [{ text: f.gpu, href: here(`../gpus/${encodeURIComponent(f.uuid)}/`) },
        when(f.t), pct(f.util), pct(f.mem)],
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
      rows("gpus", d.gpus, (g) => [g.index, { text: g.uuid, href: here(`../../gpus/${encodeURIComponent(g.uuid)}/`) },
        g.generation, g.lease, g.tenant]);
      heat("chart-gpu-util", d.gpu_heat, d.gpu_heat.util, t("Compute utilisation per GPU"));
      heat("chart-gpu-mem", d.gpu_heat, d.gpu_heat.mem, t("Memory-bandwidth utilisation per GPU"));
      Plotly.react("chart-power", [{ type: "scatter", mode: "lines", name: "mean W per GPU", x: times(d.power.t),
        y: d.power.watts }], layout(t("Power per GPU (W)")), config);
    },
  };

  async function load() {
    lastLoad = Date.now();
    const url = `${document.body.dataset.source}?range=${encodeURIComponent(range)}&page=${poolPage}`;
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
    for (const [, t, util, , , gen] of samples) {
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
  for (const [id, step] of [["page-prev", -1], ["page-next", 1]]) {
    const button = document.getElementById(id);
    if (button) button.addEventListener("click", () => {
      poolPage = Math.max(1, poolPage + step);
      history.replaceState(null, "", `?range=${range}&page=${poolPage}`);
      load();
    });
  }
  load().then(connect);
})();
