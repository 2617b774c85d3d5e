// The live page (GET / on the status endpoint): one self-contained HTML file, no network beyond
// its own endpoint, that reads /status every second (with the page's own ?token=) and shows a
// row per rank, stragglers first, then the slowest (the GPU columns only when some rank has
// NVML's figures).
#pragma once

#include <string_view>

namespace dtrun::agent::detail {

inline constexpr std::string_view kLivePage = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dtrun: live</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.2em;margin:0 0 .3em}
#job{color:#555;margin-bottom:1em}
table{border-collapse:collapse}
th,td{padding:.25em .7em;text-align:right;border-bottom:1px solid #ddd}
th{background:#f4f4f4;cursor:pointer}
td.l,th.l{text-align:left}
tr.failed td{color:#b00}
tr.slow td{background:#fff4e0}
tr.straggler td{background:#ffe0e0;font-weight:bold}
#stragglers{color:#b00;margin-bottom:.6em}
#err{color:#b00}
table.nogpu .g{display:none}
</style></head><body>
<h1>dtrun: <span id="run">?</span></h1>
<div id="job"></div><div id="stragglers"></div><div id="err"></div>
<table id="ranks" class="nogpu"><thead><tr><th>rank</th><th>node</th><th class="l">host</th>
<th>pid</th><th class="l">state</th><th class="l">operation</th><th>ops</th><th>ops/s</th>
<th>since progress (s)</th><th>lag</th><th>late (s)</th><th>CPU %</th><th>RSS MiB</th>
<th class="g">GPU</th><th class="g">GPU %</th><th class="g">GPU MiB</th></tr></thead>
<tbody id="rows"></tbody></table>
<script>
"use strict";
const q = new URLSearchParams(location.search);
const url = "status" + (q.get("token") ? "?token=" + encodeURIComponent(q.get("token")) : "");
function cell(text, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = text === undefined || text === null ? "" : String(text);
  return td;
}
function fixed(v, digits) { return v === undefined ? "" : v.toFixed(digits); }
function render(job) {
  const nodes = job.nodes || [job];
  document.getElementById("run").textContent = job.run_id || (nodes[0] || {}).run_id || "";
  const first = nodes[0] || {};
  document.getElementById("job").textContent =
    nodes.length + " node(s), round " + first.round + ", attempt " + first.attempt +
    ", restarts " + first.restarts + "/" + first.max_restarts + ", " + first.state;
  const ranks = [];
  let most = 0;
  let gpus = false;
  for (const n of nodes) for (const r of n.ranks) {
    ranks.push([n, r]);
    most = Math.max(most, r.ops);
    gpus = gpus || r.gpu !== undefined;
  }
  document.getElementById("ranks").className = gpus ? "" : "nogpu";
  const late = r => r.straggler ? (r.late_seconds || 0) : -1;
  ranks.sort((a, b) => (late(b[1]) - late(a[1])) || (a[1].ops - b[1].ops) || (a[1].rank - b[1].rank));
  document.getElementById("stragglers").textContent = ranks.filter(([n, r]) => r.straggler)
    .map(([n, r]) => "straggler: rank " + r.rank + " on " + n.host + " reaches collectives " +
      fixed(r.late_seconds, 2) + " s after the others").join("; ");
  const body = document.getElementById("rows");
  body.replaceChildren();
  for (const [n, r] of ranks) {
    const tr = document.createElement("tr");
    tr.className = r.state === "failed" ? "failed" :
      (r.straggler ? "straggler" : (most - r.ops > 0 ? "slow" : ""));
    tr.append(cell(r.rank), cell(n.node_rank), cell(n.host, "l"), cell(r.pid),
      cell(r.state, "l"), cell(r.op, "l"), cell(r.ops), cell(fixed(r.ops_per_second, 1)),
      cell(fixed(r.since_progress_seconds, 1)), cell(most - r.ops), cell(fixed(r.late_seconds, 2)),
      cell(fixed(r.cpu_percent, 0)),
      cell(r.rss_bytes === undefined ? "" : (r.rss_bytes / 1048576).toFixed(0)),
      cell(r.gpu, "g"), cell(r.gpu_utilization, "g"),
      cell(r.gpu_memory_bytes === undefined ? "" : (r.gpu_memory_bytes / 1048576).toFixed(0), "g"));
    body.append(tr);
  }
}
async function refresh() {
  try {
    const response = await fetch(url, {cache: "no-store"});
    if (!response.ok) throw new Error(response.status + " " + await response.text());
    render(await response.json());
    document.getElementById("err").textContent = "";
  } catch (e) {
    document.getElementById("err").textContent = "cannot read the status: " + e.message;
  }
  setTimeout(refresh, 1000);
}
refresh();
</script></body></html>
)html";

}  // namespace dtrun::agent::detail
