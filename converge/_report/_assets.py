"""The run report's static assets: its stylesheet, its one script, and the CSP that admits them.

Kept apart from `_report` so the page's layout code stays short. The script is allowed by its
SHA-256 hash alone (`POLICY`), so editing `SCRIPT` updates the policy with it; nothing else may
run, load or be fetched. The review console embeds `CSS` and `SCRIPT` in its own page and
allows `SCRIPT` by `SCRIPT_HASH`, so the script reads only what the report's body holds: the
lineage graph, the fact filter and its rows.
"""

from __future__ import annotations

from base64 import b64encode
from hashlib import sha256
from typing import Final

__all__ = ["CSS", "POLICY", "SCRIPT", "SCRIPT_HASH"]

SCRIPT: Final = """(function () {
  var edges = document.querySelectorAll(".lineage .edge");
  document.querySelectorAll(".lineage .node").forEach(function (node) {
    var ref = node.getAttribute("data-ref");
    function mark(on) {
      node.classList.toggle("hot", on);
      edges.forEach(function (edge) {
        if (edge.getAttribute("data-from") === ref || edge.getAttribute("data-to") === ref) {
          edge.classList.toggle("hot", on);
        }
      });
    }
    node.addEventListener("mouseenter", function () { mark(true); });
    node.addEventListener("mouseleave", function () { mark(false); });
  });
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
  document.querySelectorAll(".lineage-scroll").forEach(function (box) {
    box.scrollLeft = box.scrollWidth;
  });
  var filter = document.getElementById("fact-filter");
  var shown = document.querySelector('[data-count="facts-shown"]');
  if (filter && shown) {
    var rows = document.querySelectorAll("tr[data-fact]");
    var apply = function () {
      var query = filter.value.trim().toLowerCase();
      var count = 0;
      rows.forEach(function (row) {
        var hit = query === "" || row.textContent.toLowerCase().indexOf(query) >= 0;
        row.hidden = !hit;
        if (hit) { count += 1; }
      });
      document.querySelectorAll("tr[data-gap]").forEach(function (gap) {
        gap.hidden = query !== "";
      });
      document.querySelectorAll(".key-group").forEach(function (group) {
        group.hidden = !group.querySelector("tr[data-fact]:not([hidden])");
      });
      shown.setAttribute("data-value", String(count));
      shown.textContent = count + " of " + rows.length + " facts";
    };
    filter.addEventListener("input", apply);
    apply();
  }
})();"""

SCRIPT_HASH: Final = b64encode(sha256(SCRIPT.encode()).digest()).decode()
POLICY: Final = (
    f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{SCRIPT_HASH}'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

CSS: Final = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --soft:#f6f8fa; --ok:#1a7f37;
  --warn:#9a6700; --budget:#bc4c00; --bad:#cf222e; --bar:#3b82c4; --accent:#0969da; }
* { box-sizing: border-box; }
html { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
body { margin: 0; color: var(--fg); background: #fff; font: 14px/1.45 system-ui, -apple-system,
  "Segoe UI", "DejaVu Sans", sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 40px; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
  font-size: 12.5px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 16px 0 6px; display: flex; align-items: center; gap: 8px; }
section { margin: 26px 0 0; }
header.run { border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px;
  background: var(--soft); }
.subtitle { color: var(--muted); margin: 0 0 10px; word-break: break-all; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 999px; font-weight: 600;
  font-size: 12.5px; color: #fff; background: var(--muted); white-space: nowrap; }
.stop-converged { background: var(--ok); } .stop-awaiting_human { background: var(--warn); }
.stop-converged_with_failures { background: var(--warn); }
.stop-cycle_budget_exhausted, .stop-fact_budget_exhausted, .stop-token_budget_exhausted,
.stop-time_budget_exhausted { background: var(--budget); }
.stop-invariant_violated, .stop-conflict { background: var(--bad); }
.detail { margin-left: 8px; }
.stats { display: grid; grid-template-columns: repeat(auto-fit, minmax(100px, 1fr)); gap: 8px;
  margin-top: 12px; }
.stat { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; }
.stat b { display: block; font-size: 19px; }
.stat span { color: var(--muted); font-size: 12px; }
.callout { margin: 12px 0 0; padding: 8px 12px; border-left: 4px solid var(--warn);
  background: #fff8c5; border-radius: 4px; }
.stat.alert b { color: var(--bad); } .stat.attention b { color: var(--warn); }
nav { margin: 14px 0 0; display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 13px; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
table { width: 100%; border-collapse: collapse; font-size: 13px; }
table.fixed { table-layout: fixed; }
th, td { text-align: left; vertical-align: top; padding: 5px 8px;
  border-bottom: 1px solid var(--line); }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.wrap { word-break: break-word; } td.num { text-align: right; white-space: nowrap; }
tr:target { background: #fff8c5; }
tr.gap td { color: var(--muted); text-align: center; font-style: italic; background: var(--soft); }
.key-chip { display: inline-block; width: 10px; height: 10px; border-radius: 2px; }
.gate { font-size: 11.5px; border-radius: 4px; padding: 0 5px; border: 1px solid var(--line); }
.gate-human { border-color: var(--warn); color: var(--warn); }
.gate-input { color: var(--muted); }
.meter { display: inline-block; width: 44px; height: 6px; background: var(--line);
  border-radius: 3px; margin-left: 6px; vertical-align: middle; overflow: hidden; }
.meter > span { display: block; height: 100%; background: var(--bar); }
.muted, .note, .empty { color: var(--muted); }
.note { font-size: 12.5px; margin: 4px 0 8px; }
.ok { color: var(--ok); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
.warn { color: var(--warn); font-weight: 600; }
details summary { cursor: pointer; color: var(--accent); font-size: 12.5px; }
pre { margin: 4px 0 0; padding: 6px 8px; background: var(--soft); border-radius: 4px;
  white-space: pre-wrap; word-break: break-word; font-size: 12px; max-height: 260px;
  overflow: auto; }
.scroll { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; font-size: 12.5px; color: var(--muted);
  margin: 6px 0; align-items: center; }
.legend i { display: inline-block; width: 18px; height: 9px; border-radius: 2px;
  vertical-align: middle; margin-right: 4px; }
dl.proof { display: grid; grid-template-columns: 150px 1fr; gap: 4px 12px; margin: 0; }
dl.proof dt { color: var(--muted); } dl.proof dd { margin: 0; word-break: break-all; }
svg text { font: 12px system-ui, "DejaVu Sans", sans-serif; fill: var(--fg); }
.lane-bg.lane-0 { fill: #fff; } .lane-bg.lane-1 { fill: #f6f8fa; }
.cycle-rule { stroke: #afb8c1; stroke-dasharray: 2 3; }
.cycle-label { font-weight: 600; font-size: 11px; fill: var(--muted); }
.idle { fill: var(--muted); font-size: 11px; }
.exec-ok .bar { fill: var(--bar); } .exec-failed .bar { fill: var(--bad); }
.exec-timed_out .bar { fill: url(#hatch); stroke: var(--budget); stroke-width: 1; }
.hatch-bg { fill: #fde2c8; } .hatch-line { stroke: var(--budget); stroke-width: 3; }
.marker circle { fill: #fff; stroke-width: 2; } .marker path { fill: none; stroke-width: 2;
  stroke-linecap: round; }
.marker-failed circle, .marker-failed path { stroke: var(--bad); }
.marker-timed_out circle, .marker-timed_out path { stroke: var(--budget); }
.col-label { font-weight: 600; fill: var(--muted); }
.node-box { fill: #fff; stroke-width: 1.2; } .node.gate-human .node-box { stroke-dasharray: 4 2; }
.node-label { font: 11.5px ui-monospace, "DejaVu Sans Mono", monospace; }
.node.hot .node-box { stroke-width: 2.5; fill: #fff8c5; }
.edge { fill: none; stroke: #8c959f; stroke-width: 1.2; opacity: .75; }
.edge.hot { stroke: var(--accent); stroke-width: 2.4; opacity: 1; }
.arrow { fill: #8c959f; }
dl.times { display: flex; flex-wrap: wrap; gap: 2px 10px; margin: 8px 0 0; font-size: 13px; }
dl.times dt { color: var(--muted); } dl.times dd { margin: 0 14px 0 0; }
.warn-note { margin: 8px 0; padding: 8px 12px; border-left: 4px solid var(--warn);
  background: #fff8c5; border-radius: 4px; }
#summary ul { margin: 4px 0; padding-left: 22px; } #summary li { margin: 2px 0; }
#summary li .wrap { word-break: break-word; }
article.held { border: 1px solid var(--warn); border-radius: 8px; padding: 4px 14px 12px;
  margin: 10px 0 14px; }
article.held h4 { font-size: 13px; margin: 12px 0 4px; }
dl.gate-facts { display: grid; grid-template-columns: 120px 1fr; gap: 3px 12px; margin: 0; }
dl.gate-facts dt { color: var(--muted); } dl.gate-facts dd { margin: 0; min-width: 0; }
dd.content { white-space: pre-wrap; }
.cmd { display: grid; grid-template-columns: 60px 1fr; gap: 8px; align-items: baseline; }
.cmd pre { user-select: all; }
a.console { font-weight: 600; }
code.ref { overflow-wrap: anywhere; word-break: break-word; }
td.refs, dd.refs { overflow-wrap: anywhere; }
.filter { display: flex; align-items: center; gap: 10px; margin: 4px 0 8px; color: var(--muted);
  font-size: 12.5px; }
.filter input { font: inherit; font-size: 13px; padding: 4px 8px; width: 320px; max-width: 60%;
  border: 1px solid var(--line); border-radius: 6px; }
.axis line { stroke: var(--muted); } .tick { fill: var(--muted); font-size: 11px; }
.human path { fill: var(--warn); } .human line { stroke: var(--warn); stroke-width: 1.5; }
.continuation path { fill: var(--budget); }
.human-key { color: var(--warn); } .continuation-key { color: var(--budget); }
footer { margin-top: 34px; color: var(--muted); font-size: 12px; }
@media print {
  @page { margin: 12mm; }
  body { font-size: 10.5pt; } main { max-width: none; padding: 0; }
  nav, .filter { display: none; }
  .scroll { overflow: visible; border: none; }
  svg.timeline, svg.lineage { max-width: 100%; height: auto; }
  section { break-inside: auto; } h2, h3 { break-after: avoid; }
  tr, .stat, dl.proof { break-inside: avoid; }
  pre { max-height: none; overflow: visible; }
  td.num .meter { display: block; margin: 3px 0 0 auto; }
  a { color: inherit; }
}
"""
