// views.js: the panels (call tree, bottom-up, functions, sandwich, lines)
// built from the state `S` that page.js keeps: the chosen threads' tree
// `S.tree`, their function rows, the mode, the search and the selected
// function.

// The selection's totals: {ei, ee, ai, ae, calls} or {incl}; for all
// threads the report's own session totals.
function selectionTotals() {
  var t = S.tree, out = {};
  VALS.forEach(function (k) { out[k] = t.v[k][0]; });
  if (S.choice.kind === "all") {
    var s = D.session;
    if (INSTR) {
      out.ei = s.elapsed_inclusive_ns;
      out.ai = s.application_inclusive_ns;
    } else {
      out.incl = s.samples;
    }
  }
  return out;
}

function est(samples) { return PERIOD ? fmtNs(samples * PERIOD) : "-"; }

// Value cells of call-tree node i of tree t.
function nodeCells(t, i, mode) {
  var inc = t.v[inclKey(mode)][i], exc = t.v[exclKey(mode)][i], whole = S.totals[inclKey(mode)];
  if (INSTR) return [fmtNs(inc), fmtPct(inc, whole), fmtNs(exc), fmtPct(exc, whole), fmtInt(t.v.calls[i])];
  return [fmtInt(inc), fmtPct(inc, whole), est(inc), fmtInt(exc), fmtPct(exc, whole), est(exc)];
}

var TREE_COLUMNS = INSTR ? [
  { label: "function", text: true, width: "minmax(180px, 1fr)" },
  { label: "total", title: "inclusive time of this call path", width: "78px" }, { label: "%", width: "58px" },
  { label: "self", title: "exclusive time of this call path", width: "78px" }, { label: "%", width: "58px" },
  { label: "calls", width: "78px" }
] : [
  { label: "function", text: true, width: "minmax(180px, 1fr)" },
  { label: "samples", title: "inclusive samples" }, { label: "%", width: "58px" },
  { label: "est. time", title: "samples \u00d7 period" },
  { label: "self", title: "exclusive samples" }, { label: "%", width: "58px" },
  { label: "est. self" }
];

function nodeTip(t, i, mode) {
  if (i === 0 && t.frame[0] < 0) return [S.choiceName];
  var f = t.frame[i], lines = [frameName(f)], src = frameSource(f), mod = frameModule(f);
  if (mod || src) lines.push([mod, src].filter(Boolean).join("  "));
  var c = nodeCells(t, i, mode);
  if (INSTR) {
    lines.push((mode === "a" ? "application" : "elapsed") + " total " + c[0] + " (" + c[1] + "), self " + c[2] + " (" + c[3] + ")");
    lines.push(c[4] + " calls");
  } else {
    lines.push(c[0] + " samples (" + c[1] + "), est. " + c[2]);
    lines.push("self " + c[3] + " samples (" + c[4] + "), est. " + c[5]);
  }
  lines.push("depth " + t.depth()[i]);
  if (isDominated(f)) lines.push(DOMINATED_TIP);
  return lines;
}

// A TreeView provider over call tree t (children filtered by `keep`).
function treeProvider(t, mode, keep, hot) {
  var hotSet = new Set(hot || []);
  return {
    roots: function () { return this.kids(0); },
    kids: function (i) {
      var k = t.children(mode, i);
      if (!keep) return k;
      return Array.prototype.filter.call(k, function (c) { return keep[c]; });
    },
    cells: function (i) { return nodeCells(t, i, mode); },
    frame: function (i) { return t.frame[i]; },
    hot: function (i) { return hotSet.has(i); },
    tip: function (i) { return nodeTip(t, i, mode); }
  };
}

function renderCallTree(panel) {
  clear(panel);
  var t = S.tree, hot = t.hotPath(S.mode);
  var keep = S.matches ? keptBy(t, S.matches) : null;
  var note = el("p", "note");
  note.textContent = "Each row is a call path; total includes its callees, self does not. The hot path is marked. " +
    "Click the arrow (or double-click, or \u2192/\u2190) to open or close a row, * to open all below.";
  panel.appendChild(note);
  var box = el("div", "treebox");
  panel.appendChild(box);
  var view = new TreeView(box, TREE_COLUMNS, treeProvider(t, S.mode, keep, hot), selectFrame);
  var open = new Set(hot);
  if (keep) {
    // Open the paths to the first matches (each node once, however deep).
    var shown = 0;
    for (var i = 1; i < t.n && shown < 200; i++) {
      if (!S.matches[t.frame[i]]) continue;
      for (var p = t.parent[i]; p > 0 && !open.has(p); p = t.parent[p]) open.add(p);
      shown++;
    }
  }
  view.setRoots(view.p.roots(), Array.from(open).filter(function (i) { return !keep || keep[i]; }));
  S.callTreeView = view;
  legend(panel);
}

function invProvider(t, mode, whole) {
  return {
    kids: function (inv) { return invertedKids(t, inv); },
    cells: function (inv) {
      return INSTR ? [fmtNs(inv.total), fmtPct(inv.total, whole)] : [fmtInt(inv.total), fmtPct(inv.total, whole), est(inv.total)];
    },
    frame: function (inv) { return inv.frame; },
    hot: function () { return false; },
    tip: function (inv) {
      var lines = [frameName(inv.frame), frameSource(inv.frame), (INSTR ? fmtNs(inv.total) : fmtInt(inv.total) + " samples") +
        " (" + fmtPct(inv.total, whole) + ") along this path of callers"];
      if (isDominated(inv.frame)) lines.push(DOMINATED_TIP);
      return lines;
    }
  };
}

var INV_COLUMNS = [{ label: "function (then its callers)", text: true, width: "minmax(180px, 1fr)" }].concat(INSTR ?
  [{ label: "time" }, { label: "%", width: "58px" }] :
  [{ label: "samples" }, { label: "%", width: "58px" }, { label: "est. time" }]);

function renderBottomUp(panel) {
  clear(panel);
  var t = S.tree, whole = S.totals[inclKey(S.mode)];
  panel.appendChild(el("p", "note", "Functions by self " + (INSTR ? "time" : "samples") +
    "; open a function to see who called it, and who called those. A row's value is the self " +
    (INSTR ? "time" : "samples") + " of the top function along that chain of callers."));
  var box = el("div", "treebox");
  panel.appendChild(box);
  var roots = invertedRoots(t, S.mode);
  if (S.matches) roots = roots.filter(function (r) { return S.matches[r.frame]; });
  var view = new TreeView(box, INV_COLUMNS, invProvider(t, S.mode, whole), selectFrame);
  view.setRoots(roots);
  legend(panel);
}

// Formatted per-function columns for the functions table.
function functionColumns() {
  var T = S.totals, a = S.mode === "a" ? "a" : "e", fam = a === "a" ? "app" : "el";
  var v = function (k) { return function (r) { return r.v[FI[k]]; }; };
  var num = function (key, label, fmt, width, title) {
    var get = v(key);
    return { key: key, label: label, title: title, width: width, get: get, fmt: function (r) { return fmt(get(r), r); } };
  };
  var text = function (key, label, get, width) { return { key: key, label: label, text: true, width: width, get: get, fmt: get }; };
  var name = text("function", "function", function (r) { return frameName(r.f); }, "280px");
  name.fmt = function (r) { return (isDominated(r.f) ? "~ " : "") + frameName(r.f); };
  name.tip = function (r) { return isDominated(r.f) ? DOMINATED_TIP : ""; };
  var cols = [
    name,
    text("module", "module", function (r) { return frameModule(r.f); }, "110px")
  ];
  if (INSTR) {
    var avg = function (k) {
      return { key: "avg_" + k, label: "",
        get: function (r) { var c = r.v[FI.calls]; return c ? r.v[FI["sum_" + k]] / c : 0; },
        fmt: function (r) { var c = r.v[FI.calls]; return c ? fmtNs(Math.round(r.v[FI["sum_" + k]] / c)) : "-"; } };
    };
    var minmax = function (kind, k) {
      return num(kind + "_" + k, "", function (x, r) { return r.v[FI.calls] ? fmtNs(x) : "-"; });
    };
    var pct = function (k) {
      var c = num(k, "", function (x) { return fmtPct(x, T[k[0] === "e" ? "ei" : "ai"]); }, "72px");
      c.key = k + "_pct";
      return c;
    };
    cols.push(num("calls", "calls", fmtInt),
      num("ei", "elapsed incl", fmtNs), num("ee", "elapsed excl", fmtNs),
      num("ai", "app incl", fmtNs), num("ae", "app excl", fmtNs));
    [["ei", "el incl %"], ["ee", "el excl %"], ["ai", "app incl %"], ["ae", "app excl %"]].forEach(function (p) {
      var c = pct(p[0]);
      c.label = p[1];
      cols.push(c);
    });
    [["min", a + "i"], ["avg", a + "i"], ["max", a + "i"], ["min", a + "e"], ["avg", a + "e"], ["max", a + "e"]].forEach(function (p) {
      var c = p[0] === "avg" ? avg(p[1]) : minmax(p[0], p[1]);
      c.label = p[0] + " " + fam + (p[1][1] === "i" ? " incl" : " excl");
      c.title = "per call";
      cols.push(c);
    });
    cols.push(num("po", "probe cost", fmtNs, "90px", "the probes' estimated cost in this function's elapsed inclusive time (subtracted only with --compensate)"));
  } else {
    cols.push(num("incl", "incl samples", fmtInt), num("excl", "excl samples", fmtInt),
      num("incl", "incl %", function (x) { return fmtPct(x, T.incl); }, "72px"),
      num("excl", "excl %", function (x) { return fmtPct(x, T.incl); }, "72px"),
      num("incl", "est. incl", est), num("excl", "est. excl", est));
  }
  cols.push(text("source", "source", function (r) { return frameSource(r.f); }, "240px"));
  return cols;
}

function filteredFunctions() {
  var m = S.matches;
  return m ? S.fnRows.filter(function (r) { return m[r.f]; }) : S.fnRows;
}

function renderFunctions(panel) {
  clear(panel);
  var cols = functionColumns(), sortKey = INSTR ? (S.mode === "a" ? "ae" : "ee") : "excl";
  var sortCol = 0;
  cols.forEach(function (c, i) { if (c.key === sortKey && !sortCol) sortCol = i; });
  var rows = filteredFunctions();
  panel.appendChild(el("p", "note", rows.length + " of " + S.fnRows.length + " functions. Click a header to sort, a row to select the function" +
    (INSTR ? "; per-call min/avg/max follow the elapsed/application switch." : "; estimated time = samples \u00d7 period.")));
  var box = el("div", "tablebox");
  panel.appendChild(box);
  var table = new TableView(box, cols, sortCol, function (r) { selectFrame(r.f); });
  table.setRows(rows);
  legend(panel);
}

// The `~` mark's legend under a panel, when a shown function has it.
function legend(panel) {
  if (!INSTR || !DOMINATED || DOMINATED.indexOf(1) < 0) return;
  panel.appendChild(el("p", "note legend", DOMINATED_LEGEND));
}

function renderLines(panel) {
  clear(panel);
  var T = S.totals, m = S.matches;
  var rows = S.lineRows.filter(function (r) {
    return !m || r.frames.some(function (f) { return m[f]; });
  });
  var cols = [
    { key: "source", label: "source", text: true, width: "280px", get: function (r) { return r.file + ":" + String(r.line).padStart(7, "0"); },
      fmt: function (r) { return r.file + ":" + r.line; } },
    { key: "function", label: INSTR ? "functions" : "function", text: true, width: "260px",
      get: function (r) { return r.frames.map(frameName).join(", "); }, fmt: function (r) { return r.frames.map(frameName).join(", "); } }
  ];
  var num = function (key, label, fmt, width) {
    return { key: key, label: label, width: width, get: function (r) { return r[key]; }, fmt: function (r) { return fmt(r[key]); } };
  };
  if (INSTR) {
    cols.push(num("calls", "calls", fmtInt), num("ei", "elapsed incl", fmtNs), num("ee", "elapsed excl", fmtNs),
      num("ai", "app incl", fmtNs), num("ae", "app excl", fmtNs));
  } else {
    cols.push(num("incl", "incl samples", fmtInt), num("excl", "excl samples", fmtInt),
      num("incl", "incl %", function (x) { return fmtPct(x, T.incl); }, "72px"),
      num("excl", "excl %", function (x) { return fmtPct(x, T.incl); }, "72px"),
      num("incl", "est. incl", est), num("excl", "est. excl", est));
  }
  panel.appendChild(el("p", "note", INSTR ?
    "Instrumentation knows functions, not lines: each function's own source line, values summed per line." :
    "Sampled source lines per function: self = samples whose innermost frame is on this line; incl = samples with the line anywhere on the stack (a caller's line is its call site)."));
  if (!rows.length) panel.appendChild(el("p", "note", "No source lines are known for these functions."));
  var box = el("div", "tablebox");
  panel.appendChild(box);
  var table = new TableView(box, cols, 2 + (INSTR ? 2 : 1), function (r) { selectFrame(r.frames[0]); });
  table.setRows(rows);
}

function renderSandwich(panel) {
  clear(panel);
  var f = S.frame;
  if (f < 0) {
    panel.appendChild(el("p", "note", "Select a function (click a row in any view, or a frame in the flame graph or timeline) to see who calls it and what it calls."));
    return;
  }
  var t = S.tree, mode = S.mode, whole = S.totals[inclKey(mode)];
  var head = el("div", "sandwich-head");
  head.appendChild(el("h3", "", (isDominated(f) ? "~ " : "") + frameName(f)));
  if (isDominated(f)) head.appendChild(el("div", "note pd", DOMINATED_TIP));
  head.appendChild(el("div", "note", [frameModule(f), frameSource(f)].filter(Boolean).join("  ")));
  var row = S.fnRows.filter(function (r) { return r.f === f; })[0];
  if (row) {
    var cols = functionColumns().slice(2), line = el("div", "sandwich-values");
    cols.forEach(function (c) {
      var text = c.fmt(row);
      if (!text) return;
      var cell = el("span", "kv");
      cell.appendChild(el("span", "k", c.label + " "));
      cell.appendChild(el("span", "v", text));
      line.appendChild(cell);
    });
    head.appendChild(line);
  } else {
    head.appendChild(el("div", "note", "Not called in the chosen threads."));
  }
  panel.appendChild(head);
  var halves = el("div", "sandwich");
  var up = el("div", "half"), down = el("div", "half");
  up.appendChild(el("h4", "", "Callers (who calls it; value = its inclusive " + (INSTR ? "time" : "samples") + " through them)"));
  down.appendChild(el("h4", "", "Callees (what it calls, merged over all its calls)"));
  var upBox = el("div", "treebox short"), downBox = el("div", "treebox short");
  up.appendChild(upBox);
  down.appendChild(downBox);
  halves.appendChild(up);
  halves.appendChild(down);
  panel.appendChild(halves);
  var callers = callersOf(t, f, mode);
  var upView = new TreeView(upBox, INV_COLUMNS, invProvider(t, mode, whole), selectFrame);
  upView.setRoots([callers], [callers]);
  var callees = calleesOf(t, f);
  var p = treeProvider(callees, mode, null, []);
  p.roots = function () { return [0]; };
  var downView = new TreeView(downBox, TREE_COLUMNS, p, selectFrame);
  downView.setRoots([0], [0]);
  if (!INSTR) {
    var lines = S.lineRows.filter(function (r) { return r.frames.indexOf(f) >= 0; });
    if (lines.length) {
      panel.appendChild(el("h4", "", "Its source lines"));
      var box = el("div", "tablebox short");
      panel.appendChild(box);
      var lt = new TableView(box, [
        { key: "line", label: "source", text: true, width: "320px", get: function (r) { return r.line; }, fmt: function (r) { return r.file + ":" + r.line; } },
        { key: "excl", label: "self samples", get: function (r) { return r.excl; }, fmt: function (r) { return fmtInt(r.excl); } },
        { key: "incl", label: "incl samples", get: function (r) { return r.incl; }, fmt: function (r) { return fmtInt(r.incl); } },
        { key: "est", label: "est. self", get: function (r) { return r.excl; }, fmt: function (r) { return est(r.excl); } }
      ], 1, null);
      lt.setRows(lines);
    }
  }
}
