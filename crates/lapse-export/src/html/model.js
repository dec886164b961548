// model.js: the embedded data and what every view is computed from: the
// chosen threads' call tree as flat typed arrays (a parent always before
// its children), their functions and lines, the bottom-up and sandwich
// structures and the search. Every walk over a tree is a loop: the depth
// of the data is never the depth of the script's stack.

var D = JSON.parse(document.getElementById("lapse-data").textContent);
var INSTR = D.method === "instrumentation";
var FR = D.frames;
var NFRAMES = FR.name.length;
var NSTRIDE = D.node_columns.length;
var VALS = D.node_columns.slice(2);
var FCOLS = D.function_columns;
var FSTRIDE = FCOLS.length;
var PERIOD = D.period_ns;

function frameName(f) { return f < 0 ? "(all)" : FR.name[f]; }
function frameModule(f) { var m = f >= 0 ? FR.module[f] : -1; return m >= 0 ? FR.modules[m] : ""; }
function frameFile(f) { var i = f >= 0 ? FR.file[f] : -1; return i >= 0 ? FR.files[i] : ""; }
function frameSource(f) {
  var file = frameFile(f);
  return file && FR.line[f] ? file + ":" + FR.line[f] : file;
}

// The node value that is inclusive / exclusive in `mode` ("e" elapsed,
// "a" application; sampling has one of each).
function inclKey(mode) { return INSTR ? (mode === "a" ? "ai" : "ei") : "incl"; }
function exclKey(mode) { return INSTR ? (mode === "a" ? "ae" : "ee") : "excl"; }

// ---- call trees ----

function Tree(n) {
  this.n = n;
  this.parent = new Int32Array(n);
  this.frame = new Int32Array(n);
  this.v = {};
  for (var k = 0; k < VALS.length; k++) this.v[VALS[k]] = new Float64Array(n);
  this.kidsBy = {};
  this.depths = null;
}

Tree.prototype.trim = function (n) {
  this.n = n;
  this.parent = this.parent.slice(0, n);
  this.frame = this.frame.slice(0, n);
  for (var k = 0; k < VALS.length; k++) this.v[VALS[k]] = this.v[VALS[k]].slice(0, n);
};

// Each node's children, heaviest first in `mode`, as one flat table:
// node i's children are ids[start[i] .. start[i+1]].
Tree.prototype.kids = function (mode) {
  var key = inclKey(mode);
  if (this.kidsBy[key]) return this.kidsBy[key];
  var n = this.n, parent = this.parent, w = this.v[key], frame = this.frame;
  var start = new Int32Array(n + 1);
  for (var i = 1; i < n; i++) start[parent[i] + 1]++;
  for (i = 1; i <= n; i++) start[i] += start[i - 1];
  var fill = start.slice(0, n);
  var ids = new Int32Array(Math.max(0, n - 1));
  for (i = 1; i < n; i++) ids[fill[parent[i]]++] = i;
  var byWeight = function (a, b) { return w[b] - w[a] || frame[a] - frame[b]; };
  for (i = 0; i < n; i++) {
    var a = start[i], b = start[i + 1];
    if (b - a > 1) {
      var part = Array.prototype.slice.call(ids.subarray(a, b));
      part.sort(byWeight);
      ids.set(part, a);
    }
  }
  return (this.kidsBy[key] = { start: start, ids: ids });
};

Tree.prototype.children = function (mode, i) {
  var k = this.kids(mode);
  return k.ids.subarray(k.start[i], k.start[i + 1]);
};

Tree.prototype.depth = function () {
  if (this.depths) return this.depths;
  var d = new Int32Array(this.n);
  for (var i = 1; i < this.n; i++) d[i] = d[this.parent[i]] + 1;
  return (this.depths = d);
};

// From the root, the heaviest child while it holds 5% of the whole (as
// the report's hot path).
Tree.prototype.hotPath = function (mode) {
  var w = this.v[inclKey(mode)], total = w[0], k = this.kids(mode), out = [], cur = 0;
  for (;;) {
    if (k.start[cur] === k.start[cur + 1]) break;
    var c = k.ids[k.start[cur]];
    if (!(w[c] >= 0.05 * total) || w[c] <= 0) break;
    out.push(c);
    cur = c;
  }
  return out;
};

var threadTrees = [];
function threadTree(ti) {
  if (threadTrees[ti]) return threadTrees[ti];
  var rows = D.threads[ti].nodes, n = rows.length / NSTRIDE, t = new Tree(n);
  for (var i = 0, o = 0; i < n; i++, o += NSTRIDE) {
    t.parent[i] = rows[o];
    t.frame[i] = rows[o + 1];
    for (var k = 0; k < VALS.length; k++) t.v[VALS[k]][i] = rows[o + 2 + k];
  }
  return (threadTrees[ti] = t);
}

// The threads' trees merged path by path (one tree per call path).
function mergeTrees(trees) {
  if (trees.length === 1) return trees[0];
  var cap = 1;
  trees.forEach(function (t) { cap += t.n - 1; });
  var m = new Tree(cap), index = new Map(), next = 1;
  m.parent[0] = -1;
  m.frame[0] = -1;
  trees.forEach(function (t) {
    var map = new Int32Array(t.n);
    for (var i = 0; i < t.n; i++) {
      var id = 0;
      if (i > 0) {
        var p = map[t.parent[i]], key = p * NFRAMES + t.frame[i];
        id = index.get(key);
        if (id === undefined) {
          id = next++;
          index.set(key, id);
          m.parent[id] = p;
          m.frame[id] = t.frame[i];
        }
      }
      map[i] = id;
      for (var k = 0; k < VALS.length; k++) m.v[VALS[k]][id] += t.v[VALS[k]][i];
    }
  });
  m.trim(next);
  return m;
}

// The tree below every outermost call of frame `f` (recursion inside it
// stays where it is): the callees half of the sandwich. Row 0 is `f`.
function calleesOf(t, f) {
  var m = new Tree(t.n), index = new Map(), next = 1;
  var map = new Int32Array(t.n).fill(-1);
  m.parent[0] = -1;
  m.frame[0] = f;
  for (var i = 1; i < t.n; i++) {
    var p = map[t.parent[i]], id;
    if (p >= 0) {
      var key = p * NFRAMES + t.frame[i];
      id = index.get(key);
      if (id === undefined) {
        id = next++;
        index.set(key, id);
        m.parent[id] = p;
        m.frame[id] = t.frame[i];
      }
    } else if (t.frame[i] === f) {
      id = 0;
    } else {
      continue;
    }
    map[i] = id;
    for (var k = 0; k < VALS.length; k++) m.v[VALS[k]][id] += t.v[VALS[k]][i];
  }
  m.trim(next);
  return m;
}

// ---- bottom-up (inverted) trees, built lazily ----
// A node stands for a frame reached upwards along some suffix of call
// paths: `nodes` are the call-tree nodes at that point of each path and
// `w` the weight each path carries.

function InvNode(frame) {
  this.frame = frame;
  this.nodes = [];
  this.w = [];
  this.total = 0;
  this.kids = null;
}

function groupInv(t, nodes, w, up) {
  var by = new Map(), out = [];
  for (var i = 0; i < nodes.length; i++) {
    var n = up ? t.parent[nodes[i]] : nodes[i];
    if (n <= 0) continue;
    var g = by.get(t.frame[n]);
    if (!g) {
      g = new InvNode(t.frame[n]);
      by.set(t.frame[n], g);
      out.push(g);
    }
    g.nodes.push(n);
    g.w.push(w[i]);
    g.total += w[i];
  }
  out.sort(function (a, b) { return b.total - a.total || a.frame - b.frame; });
  return out;
}

// Roots: every frame with its self weight in `mode`.
function invertedRoots(t, mode) {
  var self = t.v[exclKey(mode)], nodes = [], w = [];
  for (var i = 1; i < t.n; i++) {
    if (self[i] > 0) {
      nodes.push(i);
      w.push(self[i]);
    }
  }
  return groupInv(t, nodes, w, false);
}

function invertedKids(t, inv) {
  if (!inv.kids) inv.kids = groupInv(t, inv.nodes, inv.w, true);
  return inv.kids;
}

// The callers half of the sandwich: frame `f` with the inclusive weight
// of its outermost calls, expanded upwards.
function callersOf(t, f, mode) {
  var incl = t.v[inclKey(mode)], inside = new Uint8Array(t.n), root = new InvNode(f);
  for (var i = 1; i < t.n; i++) {
    var under = inside[t.parent[i]];
    if (t.frame[i] === f && !under) {
      root.nodes.push(i);
      root.w.push(incl[i]);
      root.total += incl[i];
    }
    inside[i] = under || t.frame[i] === f ? 1 : 0;
  }
  return root;
}

// ---- functions and lines of a choice of threads ----

var FI = {};
FCOLS.forEach(function (c, i) { FI[c] = i; });

// Rows {f: frame, v: values by function_columns} of the threads.
function functionRows(threads, all) {
  var rows = [];
  var add = function (flat, by) {
    for (var o = 0; o < flat.length; o += FSTRIDE) {
      var f = flat[o], r = by.get(f);
      if (!r) {
        r = { f: f, v: new Float64Array(FSTRIDE) };
        r.v[0] = f;
        for (var k = 1; k < FSTRIDE; k++) r.v[k] = flat[o + k];
        by.set(f, r);
        rows.push(r);
        continue;
      }
      var called = INSTR ? flat[o + FI.calls] > 0 : true, had = INSTR ? r.v[FI.calls] > 0 : true;
      for (k = 1; k < FSTRIDE; k++) {
        var c = FCOLS[k], x = flat[o + k];
        if (c.lastIndexOf("min_", 0) === 0) {
          if (called) r.v[k] = had ? Math.min(r.v[k], x) : x;
        } else if (c.lastIndexOf("max_", 0) === 0) {
          r.v[k] = Math.max(r.v[k], x);
        } else {
          r.v[k] += x;
        }
      }
    }
  };
  var by = new Map();
  if (all && D.all_functions) add(D.all_functions, by);
  else threads.forEach(function (ti) { add(D.threads[ti].functions, by); });
  return rows;
}

// Whether a function row's time is within the probes' own uncertainty:
// the probe cost in its inclusive time (po) is more than a quarter of its
// application inclusive time without it (the rule of the report's
// `probe_dominated`, lapse_analysis::values::probe_dominated). Such a
// row's times can be off by more than 25 % either way.
function probeDominated(v) {
  if (!INSTR) return false;
  var po = v[FI.po], ai = v[FI.ai];
  var without = D.session.compensated ? ai : Math.max(0, ai - po);
  return po > 0 && po * 4 > without;
}

// Frames whose function row is probe-dominated (a Uint8Array by frame).
function dominatedFrames(fnRows) {
  var out = new Uint8Array(NFRAMES);
  fnRows.forEach(function (r) { if (probeDominated(r.v)) out[r.f] = 1; });
  return out;
}

var DOMINATED = null;
function isDominated(f) { return !!(DOMINATED && f >= 0 && DOMINATED[f]); }
var DOMINATED_TIP = "probe-dominated: the probes' own cost is more than a quarter of this function's on-CPU time, " +
  "so its times can be off by more than 25 % either way";
var DOMINATED_LEGEND = "~ before a name: probe-dominated (the probes' cost is more than a quarter of the function's on-CPU time; " +
  "its times can be off by more than 25 % either way).";

// Source lines of the threads: sampling's own counts per (function, file,
// line); instrumentation's functions' own lines, their values summed per
// line (as the report's lines view).
function lineRows(threads, fnRows) {
  var by = new Map(), rows = [];
  if (!INSTR) {
    threads.forEach(function (ti) {
      var flat = D.threads[ti].lines;
      for (var o = 0; o < flat.length; o += 5) {
        var key = flat[o] + ":" + flat[o + 1] + ":" + flat[o + 2], r = by.get(key);
        if (!r) {
          r = { frames: [flat[o]], file: FR.files[flat[o + 1]], line: flat[o + 2], incl: 0, excl: 0 };
          by.set(key, r);
          rows.push(r);
        }
        r.incl += flat[o + 3];
        r.excl += flat[o + 4];
      }
    });
    return rows;
  }
  fnRows.forEach(function (fr) {
    var file = frameFile(fr.f), line = FR.line[fr.f];
    if (!file || !line) return;
    var key = file + ":" + line, r = by.get(key);
    if (!r) {
      r = { frames: [], file: file, line: line, calls: 0, ei: 0, ee: 0, ai: 0, ae: 0 };
      by.set(key, r);
      rows.push(r);
    }
    r.frames.push(fr.f);
    r.calls += fr.v[FI.calls];
    ["ei", "ee", "ai", "ae"].forEach(function (c) { r[c] += fr.v[FI[c]]; });
  });
  return rows;
}

// ---- search ----

var haystack = null;
// Which frames match `query` (text, or /regex/): a Uint8Array, or null
// when there is no query.
function matchFrames(query) {
  query = query.trim();
  if (!query) return null;
  if (!haystack) {
    haystack = new Array(NFRAMES);
    for (var i = 0; i < NFRAMES; i++) haystack[i] = (FR.name[i] + "\u0001" + frameModule(i) + "\u0001" + frameFile(i)).toLowerCase();
  }
  var test, m = /^\/(.+)\/$/.exec(query);
  if (m) {
    try {
      var re = new RegExp(m[1], "i");
      test = function (i) { return re.test(haystack[i]); };
    } catch (e) {
      m = null;
    }
  }
  if (!m) {
    var q = query.toLowerCase();
    test = function (i) { return haystack[i].indexOf(q) >= 0; };
  }
  var out = new Uint8Array(NFRAMES);
  for (i = 0; i < NFRAMES; i++) out[i] = test(i) ? 1 : 0;
  return out;
}

// Nodes of `t` that match or lead to a match (for filtering a tree).
function keptBy(t, matches) {
  var keep = new Uint8Array(t.n);
  for (var i = t.n - 1; i >= 1; i--) {
    if (keep[i] || matches[t.frame[i]]) {
      keep[i] = 1;
      keep[t.parent[i]] = 1;
    }
  }
  keep[0] = 1;
  return keep;
}
