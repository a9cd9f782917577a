// attnbench dashboard: draws the charts from the page's own JSON and applies the filters.
// Plain JS over Plotly (inlined above it), so the page works from file:// and GitHub Pages alike.
"use strict";
const STARTED = performance.now();
const DATA = JSON.parse(document.getElementById("dashboard-data").textContent);
const FILTERS = DATA.filters;
const CONFIG = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"]};

// every title is the history's text: set as text, never parsed as markup
for (const title of document.querySelectorAll(".chart-title")) title.textContent = DATA.charts[Number(title.dataset.index)].title;

function selection() {
  const chosen = {};
  for (const name of FILTERS) chosen[name] = document.getElementById("filter-" + name).value;
  return chosen;
}

function matches(attributes, chosen) {
  return FILTERS.every((name) => chosen[name] === "" || attributes[name] === chosen[name]);
}

function draw(div) {
  const chart = DATA.charts[Number(div.dataset.index)];
  const traces = chart.figure.data.filter((trace) => matches(trace.meta, selection()));
  const drawn = Plotly.react(div, traces, {...chart.figure.layout, template: DATA.template}, CONFIG);
  div.dataset.stale = "0";
  return drawn;
}

// a chart is drawn only once it enters the viewport, so the page is ready once the charts in view are
// drawn and painted, however many the history holds; observe() reports each chart's state once at once
function ready(drawing) {
  if (window.dashboardReady !== undefined || window.dashboardDrawing) return;
  window.dashboardDrawing = true;
  Promise.all(drawing).then(() => requestAnimationFrame(() => setTimeout(() => {  // after the next paint
    window.dashboardReady = performance.now();  // ms since navigation: the charts in view drawn and painted
    window.dashboardRenderMs = window.dashboardReady - STARTED;  // of which this script and the paint
    window.dashboardDrawnAtLoad = drawing.length;
  })));
}

const OBSERVER = new IntersectionObserver((seen) => {
  const drawing = [];
  for (const entry of seen) {
    if (!entry.isIntersecting || entry.target.dataset.stale !== "1") continue;
    try {
      drawing.push(draw(entry.target));
    } catch (error) {  // said on the console; the other charts of this batch still draw
      console.error("chart " + entry.target.dataset.title + ": " + error);
    }
  }
  ready(drawing);
});

function render() {
  const chosen = selection();
  let shown = 0;
  DATA.charts.forEach((chart, i) => {
    const div = document.getElementById("chart-" + i);
    div.hidden = !chart.figure.data.some((trace) => matches(trace.meta, chosen));
    div.parentElement.hidden = div.hidden;  // the chart's box, title and all
    shown += div.hidden ? 0 : 1;
    div.dataset.stale = div.hidden ? "0" : "1";
    OBSERVER.unobserve(div);
    if (!div.hidden) OBSERVER.observe(div);
  });
  for (const row of document.querySelectorAll("[data-filtered]")) row.hidden = !matches(row.dataset, chosen);
  document.getElementById("shown").textContent = shown + " of " + DATA.charts.length + " charts shown";
}

for (const name of FILTERS) document.getElementById("filter-" + name).addEventListener("change", render);
render();
if (!DATA.charts.length) ready([]);
