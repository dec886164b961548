// lapse HTML report: renders the JSON embedded in #lapse-data. Plain JS, no
// network, no libraries. Any script error is shown on the page and marked on
// <body data-error> so that tests and users both see it.
window.onerror = function (message) {
  var box = document.getElementById("script-error");
  if (!box) {
    box = document.createElement("div");
    box.id = "script-error";
    document.body.insertBefore(box, document.body.firstChild);
  }
  box.textContent = "Script error: " + message;
  document.body.setAttribute("data-error", String(message));
};

(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("lapse-data").textContent);
  var instr = data.method === "instrumentation";

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function ns(v) {
    if (v === null || v === undefined) return "-";
    if (v < 1e3) return v + " ns";
    var units = [[1e9, "s"], [1e6, "ms"], [1e3, "\u00b5s"]];
    for (var i = 0; i < units.length; i++) {
      if (v >= units[i][0]) {
        var x = v / units[i][0];
        return (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)) + " " + units[i][1];
      }
    }
    return v + " ns";
  }
  function pct(v) { return v === null || v === undefined ? "-" : v.toFixed(2) + "%"; }

  // Columns: key, header, kind (text | int | ns | pct).
  var columns = instr ? [
    ["function", "function", "text"], ["module", "module", "text"], ["calls", "calls", "int"],
    ["elapsed_inclusive_ns", "elapsed incl", "ns"], ["elapsed_exclusive_ns", "elapsed excl", "ns"],
    ["application_inclusive_ns", "app incl", "ns"], ["application_exclusive_ns", "app excl", "ns"],
    ["elapsed_inclusive_pct", "el incl %", "pct"], ["elapsed_exclusive_pct", "el excl %", "pct"],
    ["avg_elapsed_inclusive_ns", "avg el incl", "ns"], ["max_elapsed_inclusive_ns", "max el incl", "ns"]
  ] : [
    ["function", "function", "text"], ["module", "module", "text"],
    ["inclusive_samples", "incl samples", "int"], ["exclusive_samples", "excl samples", "int"],
    ["inclusive_pct", "incl %", "pct"], ["exclusive_pct", "excl %", "pct"]
  ];
  var weightKey = instr ? "elapsed_inclusive_ns" : "inclusive_samples";
  function show(v, kind) {
    if (kind === "ns") return ns(v);
    if (kind === "pct") return pct(v);
    return v === null || v === undefined ? "-" : String(v);
  }

  // ---- summary ----
  function summary() {
    var s = data.session;
    var t = el("table", "summary");
    var rows = [["command", (s.command || []).join(" ")], ["method", data.method],
      ["duration", ns(s.duration_ns)], ["processes / threads", s.processes + " / " + s.threads]];
    if (instr) {
      rows.push(["elapsed", ns(s.elapsed_inclusive_ns)], ["application", ns(s.application_inclusive_ns)],
        ["probe cost", s.probe_cost_ns.toFixed(1) + " ns per probe"]);
    } else {
      rows.push(["samples", String(s.samples)], ["event", (s.sample_event || "?") + ", period " + s.sample_period]);
    }
    rows.push(["hot path", (data.hot_path || []).join(" \u2192 ") || "-"]);
    rows.forEach(function (r) {
      var tr = el("tr");
      tr.appendChild(el("td", "", r[0]));
      tr.appendChild(el("td", r[0] === "hot path" ? "hot" : "", r[1]));
      t.appendChild(tr);
    });
    document.getElementById("summary").appendChild(t);
  }

  // ---- sortable functions table ----
  function functionsTable() {
    var table = el("table", "functions");
    var head = el("tr");
    var body = el("tbody");
    var sortKey = instr ? "elapsed_exclusive_ns" : "exclusive_samples";
    var ascending = false;
    function fill() {
      var kind = columns.filter(function (c) { return c[0] === sortKey; })[0][2];
      var rows = data.functions.slice().sort(function (a, b) {
        var x = a[sortKey], y = b[sortKey];
        var r = kind === "text" ? String(x || "").localeCompare(String(y || "")) : (x || 0) - (y || 0);
        return ascending ? r : -r;
      });
      body.textContent = "";
      rows.forEach(function (row) {
        var tr = el("tr", "fn-row");
        columns.forEach(function (c) { tr.appendChild(el("td", c[2] === "text" ? "text" : "", show(row[c[0]], c[2]))); });
        body.appendChild(tr);
      });
      Array.prototype.forEach.call(head.children, function (th) {
        var on = th.getAttribute("data-key") === sortKey;
        th.classList.toggle("sorted", on);
        th.classList.toggle("asc", on && ascending);
      });
    }
    columns.forEach(function (c) {
      var th = el("th", c[2] === "text" ? "text" : "", c[1]);
      th.setAttribute("data-key", c[0]);
      th.onclick = function () {
        if (sortKey === c[0]) ascending = !ascending;
        else { sortKey = c[0]; ascending = c[2] === "text"; }
        fill();
      };
      head.appendChild(th);
    });
    var thead = el("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    table.appendChild(body);
    fill();
    document.getElementById("functions").appendChild(table);
  }

  // ---- call tree ----
  function nodeText(n) {
    var v = instr
      ? ns(n.elapsed_inclusive_ns) + " (" + pct(n.elapsed_inclusive_pct) + "), excl " + ns(n.elapsed_exclusive_ns) + ", " + n.calls + (n.calls === 1 ? " call" : " calls")
      : n.inclusive_samples + " samples (" + pct(n.inclusive_pct) + "), excl " + n.exclusive_samples;
    return [n.function + " ", v];
  }
  function treeList(nodes, depth, top) {
    var ul = el("ul", top ? "tree top" : "tree");
    nodes.forEach(function (n) {
      var li = el("li", "tree-node");
      var text = nodeText(n);
      var label = el("span", n.hot ? "hot" : "", text[0]);
      var value = el("span", "val", text[1]);
      if (n.children && n.children.length) {
        var d = el("details");
        if (depth < 2 || n.hot) d.open = true;
        var s = el("summary");
        s.appendChild(label);
        s.appendChild(value);
        d.appendChild(s);
        d.appendChild(treeList(n.children, depth + 1, false));
        li.appendChild(d);
      } else {
        var div = el("div", "leaf");
        div.appendChild(label);
        div.appendChild(value);
        li.appendChild(div);
      }
      ul.appendChild(li);
    });
    return ul;
  }

  // ---- flame graph: roots at the bottom, width = inclusive value ----
  function flame() {
    var box = document.getElementById("flame");
    var rowHeight = 16;
    var all = { "function": "all", children: data.roots };
    all[weightKey] = data.roots.reduce(function (s, n) { return s + (n[weightKey] || 0); }, 0);
    function depthOf(n) {
      return 1 + (n.children || []).reduce(function (m, c) { return Math.max(m, depthOf(c)); }, 0);
    }
    function draw(root) {
      box.textContent = "";
      var total = root[weightKey] || 1;
      var depth = depthOf(root);
      box.style.height = depth * rowHeight + "px";
      function place(n, left, level) {
        var w = (n[weightKey] || 0) / total * 100;
        if (w < 0.05) return;
        var d = el("div", "flame-node", n["function"]);
        d.style.left = left + "%";
        d.style.width = w + "%";
        d.style.bottom = level * rowHeight + "px";
        var hue = 20 + (n["function"].length * 37) % 40;
        d.style.background = "hsl(" + hue + ",85%," + (n.hot ? 55 : 65) + "%)";
        d.title = n["function"] + ": " + (instr ? ns(n[weightKey]) : n[weightKey] + " samples") +
          " (" + (100 * (n[weightKey] || 0) / (all[weightKey] || 1)).toFixed(2) + "% of all)";
        d.onclick = function () { draw(n); };
        box.appendChild(d);
        var x = left;
        (n.children || []).forEach(function (c) {
          place(c, x, level + 1);
          x += (c[weightKey] || 0) / total * 100;
        });
      }
      place(root, 0, 0);
    }
    document.getElementById("flame-reset").onclick = function () { draw(all); };
    draw(all);
  }

  summary();
  functionsTable();
  document.getElementById("calltree").appendChild(treeList(data.roots, 0, true));
  flame();
  document.body.setAttribute("data-rendered", "yes");
})();
