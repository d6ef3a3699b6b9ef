// Live dashboard: draws the charts from the snapshot, then re-reads /dashboard/data.json
// whenever the server says something changed (websocket), at most once a second, and
// every 10 s regardless, so a dropped socket never freezes the page.
"use strict";
(function () {
  const REFRESH_MIN_MS = 1000;
  const POLL_MS = 10000;
  let pending = false;
  let last = 0;

  // the page's language and the words the server chose (webapp/dashboard/strings.py)
  const S = JSON.parse(document.getElementById("strings").textContent);
  const t = (text) => S.text[text] || text;
  const w = (code) => (code === null || code === undefined ? "—" : S.words[code] || String(code).replace(/_/g, " "));
  const zoned = new Intl.DateTimeFormat(S.lang, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  const when = (v) => (v === null || v === undefined || v === "" ? null : zoned.format(new Date(v)));
  const money = (v) => (v === null || v === undefined ? null
    : new Intl.NumberFormat(S.lang, S.currency ? { style: "currency", currency: S.currency } : {}).format(Number(v)));

  function rows(tbodyId, items, cells, rowClass) {
    const body = document.querySelector(`#${tbodyId} tbody`);
    if (!body) return;
    body.replaceChildren(...items.map((item) => {
      const tr = document.createElement("tr");
      if (rowClass) tr.className = rowClass(item);
      for (const value of cells(item)) {
        const td = document.createElement("td");
        td.textContent = value === null || value === undefined ? "—" : String(value);
        tr.appendChild(td);
      }
      return tr;
    }));
  }

  function draw(snap) {
    const util = snap.utilisation;
    Plotly.react("chart-util", [
      { type: "bar", name: "compute", x: util.map((u) => u.generation), y: util.map((u) => u.util_gpu) },
      { type: "bar", name: "memory bandwidth", x: util.map((u) => u.generation), y: util.map((u) => u.util_mem_bw) },
    ], { title: { text: t("Utilisation, last 10 min") }, barmode: "group",
         yaxis: { range: [0, 1], tickformat: ".0%" }, margin: { t: 40 } }, { displayModeBar: false });
    const states = Object.keys(snap.leases.by_state);
    Plotly.react("chart-leases", [
      { type: "bar", x: states.map(w), y: states.map((s) => snap.leases.by_state[s]) },
    ], { title: { text: t("Leases by state") }, margin: { t: 40 } }, { displayModeBar: false });
    Plotly.react("chart-cost", [
      { type: "bar", name: "quoted", x: snap.cost.map((c) => c.tenant), y: snap.cost.map((c) => c.priced_micro / 1e6) },
      { type: "bar", name: "billed (sum of bill lines)", x: snap.cost.map((c) => c.tenant), y: snap.cost.map((c) => c.billed_micro / 1e6) },
    ], { title: { text: t("Cost by tenant (currency units)") }, barmode: "group", margin: { t: 40 } }, { displayModeBar: false });
    const heat = snap.idle_heatmap;
    Plotly.react("chart-idle", [
      { type: "heatmap", x: heat.hours, y: heat.weekdays, z: heat.idle_share, zmin: 0, zmax: 1,
        colorscale: "YlOrRd", reversescale: true, hoverongaps: false },
    ], { title: { text: t("Idle capacity by hour (share of GPU samples idle)") }, margin: { t: 40 } },
       { displayModeBar: false });
    const pct = (v) => (v === null || v === undefined ? null : `${Math.round(v * 100)}%`);
    rows("advice", snap.advice, (a) => [a.pool, w(a.action), a.replicas_now, a.replicas_advised,
      pct(a.mean_util), pct(a.mean_mem_util)]);
    rows("fleet", snap.fleet, (r) => [r.generation, r.total, r.leased, r.quarantined, r.free]);
    rows("nodes", snap.nodes, (n) => [n.name, `${n.site} (${n.pue})`, n.gpus, w(n.status), w(n.trust), when(n.last_good_attestation)],
      (n) => `trust-${n.trust}`);
    rows("leases", snap.leases.recent, (l) => [l.id, l.tenant, w(l.state), l.gpus, l.precision, money(l.price)]);
    rows("ledger-txs", snap.ledger.recent, (t) => [t.function, t.block, t.tx, t.code]);
    const ledger = document.getElementById("ledger");
    const outbox = Object.entries(snap.ledger.outbox).map(([k, v]) => `${k} ${v}`).join(", ");
    ledger.textContent = `Outbox: ${outbox} · settlements ${snap.ledger.settlements} · last block ${snap.ledger.last_block ?? "—"}`;
    document.body.dataset.snapshotAt = snap.at;
  }

  async function refresh() {
    pending = false;
    last = Date.now();
    const response = await fetch("/dashboard/data.json", { cache: "no-store" });
    if (response.ok) draw(await response.json());
  }

  function soon() {
    if (pending) return;
    pending = true;
    setTimeout(refresh, Math.max(0, REFRESH_MIN_MS - (Date.now() - last)));
  }

  function connect() {
    const badge = document.getElementById("live");
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${scheme}://${location.host}/ws/dashboard/`);
    socket.onopen = () => { badge.textContent = t("live"); badge.classList.add("on"); };
    // telemetry arrives every few seconds: the 10 s poll covers it; other changes at once
    socket.onmessage = (message) => { if (JSON.parse(message.data).kind !== "telemetry") soon(); };
    socket.onclose = () => {
      badge.textContent = t("reconnecting…"); badge.classList.remove("on");
      setTimeout(connect, 3000);
    };
  }

  draw(JSON.parse(document.getElementById("snapshot").textContent));
  setInterval(soon, POLL_MS);
  connect();
})();
