// Live lease states and progress: polls the tenant's live.json and updates every row that
// carries data-lease, without reloading the page.
(function () {
  "use strict";
  const script = document.currentScript;
  const url = script && script.dataset.live;
  const POLL_MS = 2000;
  if (!url) return;
  function apply(rows) {
    for (const row of rows) {
      for (const el of document.querySelectorAll('[data-lease="' + row.id + '"]')) {
        const state = el.querySelector(".state") || document.getElementById("state");
        if (state && state.dataset.state !== row.state) {
          state.dataset.state = row.state;
          state.textContent = row.word;  // the state in words, in the page's language
          state.className = "state state-" + row.state;
          // a lease's own page shows more than its state (GPUs, price, what may be done next)
          if (el.dataset.reloadOnChange !== undefined) location.reload();
        }
        const bar = el.querySelector("progress");
        if (bar) bar.value = row.progress;
        const pct = el.querySelector(".pct");
        if (pct) pct.textContent = row.progress + " %";
      }
    }
  }
  async function poll() {
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (response.ok) apply((await response.json()).leases);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }
  setTimeout(poll, POLL_MS);
})();
