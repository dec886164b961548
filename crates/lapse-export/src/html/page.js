// page.js: the page's state and wiring: which threads are chosen, the
// elapsed/application switch, the search, the selected function and the
// visible tab. A change marks every panel stale; only the visible one is
// redrawn at once, the others when they are shown.

var S = {
  choice: { kind: "all" },
  choiceName: "all threads",
  threads: [],
  mode: "e",
  query: "",
  matches: null,
  frame: -1,
  tab: "calltree",
  tree: null,
  totals: null,
  fnRows: [],
  lineRows: [],
  stale: {}
};

var PANELS = ["calltree", "bottomup", "functions", "sandwich", "flame", "timeline", "lines"];
var flame = null, timeline = null;

function choose(choice) {
  timed("choose", function () { chooseNow(choice); });
}

function chooseNow(choice) {
  S.choice = choice;
  var all = D.threads.map(function (_, i) { return i; });
  if (choice.kind === "thread") {
    S.threads = [choice.ti];
    var th = D.threads[choice.ti];
    S.choiceName = "thread " + th.pid + ":" + th.tid + (th.name ? " " + th.name : "");
  } else if (choice.kind === "process") {
    S.threads = all.filter(function (i) { return D.threads[i].pid === choice.pid; });
    S.choiceName = "process " + choice.pid;
  } else {
    S.threads = all;
    S.choiceName = "all threads";
  }
  S.tree = S.threads.length ? mergeTrees(S.threads.map(threadTree)) : new Tree(1);
  if (!S.threads.length) S.tree.frame[0] = -1;
  S.totals = selectionTotals();
  S.fnRows = functionRows(S.threads, choice.kind === "all");
  DOMINATED = dominatedFrames(S.fnRows);
  S.lineRows = lineRows(S.threads, S.fnRows);
  document.getElementById("selection").textContent = "Showing " + S.choiceName;
  markThreads();
  summary();
  refresh();
}

function selectFrame(f) {
  if (f === undefined || f < 0 || f === S.frame) return;
  S.frame = f;
  document.body.setAttribute("data-selected", frameName(f));
  PANELS.forEach(function (p) { if (p === "sandwich" || p === "flame" || p === "timeline") S.stale[p] = true; });
  var tabButton = document.querySelector('#tabs button[data-tab="sandwich"]');
  tabButton.textContent = "Sandwich: " + (frameName(f).length > 28 ? frameName(f).slice(0, 27) + "\u2026" : frameName(f));
  if (S.tab === "flame" || S.tab === "timeline") draw(S.tab);
}

function refresh() {
  PANELS.forEach(function (p) { S.stale[p] = true; });
  draw(S.tab);
}

// Runs `fn` and marks on <body> how long it took (data-last-ms), for
// benchmarks and the curious.
function timed(what, fn) {
  var t0 = performance.now();
  fn();
  document.body.setAttribute("data-last", what);
  document.body.setAttribute("data-last-ms", (performance.now() - t0).toFixed(1));
}

function draw(tab) {
  if (S.stale[tab]) timed(tab, function () { drawNow(tab); });
}

function drawNow(tab) {
  var panel = document.getElementById("panel-" + tab);
  S.stale[tab] = false;
  if (tab === "calltree") renderCallTree(panel);
  else if (tab === "bottomup") renderBottomUp(panel);
  else if (tab === "functions") renderFunctions(panel);
  else if (tab === "sandwich") renderSandwich(panel);
  else if (tab === "lines") renderLines(panel);
  else if (tab === "flame") {
    if (!flame) flame = new Flame(panel, selectFrame);
    flame.set(S.tree, S.mode, S.matches, S.frame, S.choiceName);
  } else if (tab === "timeline") {
    if (!timeline) timeline = new Timeline(panel, selectFrame);
    timeline.set(S.threads, S.matches, S.frame);
  }
}

function showTab(tab) {
  S.tab = tab;
  PANELS.forEach(function (p) {
    document.getElementById("panel-" + p).hidden = p !== tab;
  });
  var buttons = document.querySelectorAll("#tabs button");
  for (var i = 0; i < buttons.length; i++) buttons[i].classList.toggle("on", buttons[i].getAttribute("data-tab") === tab);
  document.body.setAttribute("data-tab", tab);
  draw(tab);
}

// ---- the threads panel ----

function threadValue(th) {
  return INSTR ? th.totals.ei : th.totals.samples;
}

function threadsPanel() {
  var box = document.getElementById("threads"), whole = 0;
  D.threads.forEach(function (th) { whole += threadValue(th); });
  var item = function (cls, label, value, onClick) {
    var e = el("div", "pick " + cls);
    e.appendChild(el("span", "pick-name", label));
    e.appendChild(el("span", "pick-value", INSTR ? fmtNs(value) : fmtInt(value)));
    var bar = el("span", "pick-bar");
    bar.style.width = (whole > 0 ? 100 * value / whole : 0).toFixed(1) + "%";
    e.appendChild(bar);
    e.title = label;
    e.onclick = onClick;
    return e;
  };
  box.appendChild(item("all-item", "All threads (" + D.threads.length + ")", whole, function () { choose({ kind: "all" }); }));
  D.processes.forEach(function (p) {
    var threads = [];
    D.threads.forEach(function (th, i) { if (th.pid === p.pid) threads.push(i); });
    if (!threads.length) return;
    var sum = threads.reduce(function (s, i) { return s + threadValue(D.threads[i]); }, 0);
    var pe = item("process-item", "process " + p.pid + (p.command ? ": " + p.command : ""), sum, function () { choose({ kind: "process", pid: p.pid }); });
    pe.setAttribute("data-pid", p.pid);
    box.appendChild(pe);
    threads.forEach(function (i) {
      var th = D.threads[i];
      var te = item("thread-item", th.tid + (th.name ? " " + th.name : ""), threadValue(th), function () { choose({ kind: "thread", ti: i }); });
      te.setAttribute("data-ti", i);
      box.appendChild(te);
    });
  });
}

function markThreads() {
  var items = document.querySelectorAll("#threads .pick");
  for (var i = 0; i < items.length; i++) {
    var e = items[i], c = S.choice, on = false;
    if (e.classList.contains("all-item")) on = c.kind === "all";
    else if (e.classList.contains("process-item")) on = c.kind === "process" && String(c.pid) === e.getAttribute("data-pid");
    else on = c.kind === "thread" && String(c.ti) === e.getAttribute("data-ti");
    e.classList.toggle("on", on);
  }
}

// ---- the summary ----

function summary() {
  var s = D.session, box = document.getElementById("summary"), items = [];
  clear(box);
  items.push(["method", D.method], ["duration", fmtNs(s.duration_ns)], ["processes / threads", s.processes + " / " + s.threads]);
  if (INSTR) {
    items.push(["elapsed", fmtNs(s.elapsed_inclusive_ns)], ["application", fmtNs(s.application_inclusive_ns) + " (" + s.application_rule + " rule)"],
      ["probe cost", (s.probe_cost_ns || 0).toFixed(1) + " ns per probe, " + (s.compensated ? "subtracted (--compensate)" : "not subtracted")]);
  } else {
    items.push(["samples", fmtInt(s.samples)], ["event", (s.sample_event || "?") + (PERIOD ? ", every " + fmtNs(PERIOD) : s.sample_period ? ", period " + s.sample_period : "")]);
  }
  if (s.lost_events) items.push(["lost events", fmtInt(s.lost_events)]);
  if (s.complete === false) items.push(["file", "incomplete (the recording was cut short)"]);
  items.forEach(function (it) {
    var e = el("span", "kv");
    e.appendChild(el("span", "k", it[0] + " "));
    e.appendChild(el("span", "v", it[1]));
    box.appendChild(e);
  });
  var hot = S.tree ? S.tree.hotPath(S.mode) : [];
  var hp = el("div", "hotpath");
  hp.appendChild(el("span", "k", "hot path (" + S.choiceName + ") "));
  hp.appendChild(el("span", "hot", hot.length ? hot.slice(0, 12).map(function (i) { return frameName(S.tree.frame[i]); }).join(" \u2192 ") +
    (hot.length > 12 ? " \u2192 \u2026 (" + hot.length + " deep)" : "") : "-"));
  box.appendChild(hp);
  if (D.nodes_kept < D.nodes_total) {
    box.appendChild(el("div", "note", "The page holds the " + fmtInt(D.nodes_kept) + " heaviest of " + fmtInt(D.nodes_total) +
      " call paths (the tree, bottom-up, sandwich and flame graph leave the lightest out); the functions and lines tables are exact."));
  }
}

// ---- wiring ----

function start() {
  threadsPanel();
  var buttons = document.querySelectorAll("#tabs button");
  for (var i = 0; i < buttons.length; i++) {
    buttons[i].onclick = (function (tab) { return function () { showTab(tab); }; })(buttons[i].getAttribute("data-tab"));
  }
  var modes = document.querySelectorAll("#mode button");
  if (!INSTR) document.getElementById("mode").hidden = true;
  for (i = 0; i < modes.length; i++) {
    modes[i].onclick = function () {
      var button = this;
      timed("mode", function () {
        S.mode = button.getAttribute("data-mode");
        for (var j = 0; j < modes.length; j++) modes[j].classList.toggle("on", modes[j] === button);
        document.body.setAttribute("data-mode", S.mode);
        summary();
        refresh();
      });
    };
  }
  var search = document.getElementById("search"), timer = 0;
  search.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () {
      timed("search", function () {
        S.query = search.value;
        S.matches = matchFrames(S.query);
        refresh();
      });
      document.body.setAttribute("data-query", S.query);
    }, 150);
  });
  window.addEventListener("resize", function () {
    if (S.tab === "flame" && flame) flame.draw();
    if (S.tab === "timeline" && timeline) timeline.draw();
  });
  document.body.setAttribute("data-mode", S.mode);
  choose({ kind: "all" });
  showTab("calltree");
  document.body.setAttribute("data-rendered", "yes");
  document.body.setAttribute("data-rendered-ms", String(Math.round(performance.now())));
  if (performance.mark) performance.mark("lapse-rendered");
}

start();
