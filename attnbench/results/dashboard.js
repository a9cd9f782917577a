// attnbench dashboard: draws the charts from the page's own JSON and applies the filters.
// Plain JS over Plotly (inlined above it), so the page works from file:// and GitHub Pages alike.
"use strict";
const STARTED = performance.now();
const DATA = JSON.parse(document.getElementById("dashboard-data").textContent);
const FILTERS = ["gpu", "backend", "strategy", "kind", "shape"];
const CONFIG = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"]};

function selection() {
  const chosen = {};
  for (const name of FILTERS) chosen[name] = document.getElementById("filter-" + name).value;
  return chosen;
}

function matches(attributes, chosen) {
  return FILTERS.every((name) => chosen[name] === "" || attributes[name] === chosen[name]);
}

function render() {
  const chosen = selection();
  let shown = 0;
  DATA.charts.forEach((chart, i) => {
    const div = document.getElementById("chart-" + i);
    const traces = chart.figure.data.filter((trace) => matches(trace.meta, chosen));
    div.hidden = traces.length === 0;
    if (div.hidden) return;
    shown += 1;
    Plotly.react(div, traces, {...chart.figure.layout, template: DATA.template}, CONFIG);
  });
  for (const row of document.querySelectorAll("[data-filtered]")) row.hidden = !matches(row.dataset, chosen);
  document.getElementById("shown").textContent = shown + " of " + DATA.charts.length + " charts shown";
}

for (const name of FILTERS) document.getElementById("filter-" + name).addEventListener("change", render);
render();
window.dashboardReady = performance.now();  // ms since navigation: the page parsed, every chart drawn
window.dashboardRenderMs = window.dashboardReady - STARTED;  // this script alone: the charts drawn
