// timeline.js: the chosen threads on one time axis. Each lane draws its
// thread's level-of-detail summary: per time bucket, the stack of the call
// path that took most of the bucket (read from the thread's node table,
// outermost call on top; frames every bucket shares are collapsed into the
// lane's title, then up to TL_ROWS levels, so deep stacks show where they
// differ) and, above it, the thread's CPU usage (sampling: its samples
// spread over their periods) and the share of the bucket it spent off the
// CPU (when there is any; with --off-cpu, pointing at it names the stack
// the thread waited in and clicking selects it). Zoom with the wheel or the
// buttons, drag to pan. A pixel that covers several buckets shows their
// dominant path: at each depth, the call most of them have there among
// those that agree on the calls above it. The finest detail is one bucket
// (the page holds a fixed number per thread).

var TL_ROW = 13, TL_ROWS = 256, TL_AXIS = 22, TL_HEAD = 16, TL_CPU = 18, TL_OFF = 8, TL_GAP = 8;

function Timeline(host, onSelect) {
  this.host = host;
  this.onSelect = onSelect;
  clear(host);
  var bar = el("div", "bar"), self = this;
  [["\u2212", "zoom-out", 2], ["+", "zoom-in", 0.5], ["Reset", "zoom-reset", 0]].forEach(function (b) {
    var btn = el("button", "", b[0]);
    btn.type = "button";
    btn.id = "timeline-" + b[1];
    btn.onclick = function () {
      timed("zoom", function () {
        if (b[2]) self.zoomBy(b[2], 0.5); else self.setView(self.full[0], self.full[1]);
      });
    };
    bar.appendChild(btn);
  });
  this.label = el("span", "note");
  bar.appendChild(this.label);
  if (D.threads.some(function (th) { return th.timeline.cpu; })) bar.appendChild(el("span", "legend-cpu", "CPU usage"));
  if (D.threads.some(function (th) { return th.timeline.off.length; })) bar.appendChild(el("span", "legend-off", "off-CPU"));
  if (D.threads.some(function (th) { return th.marks.length; })) bar.appendChild(el("span", "legend-mark", "mark"));
  if (D.paused.length) bar.appendChild(el("span", "legend-paused", "paused (not recorded)"));
  host.appendChild(bar);
  this.scroll = el("div", "timeline-scroll");
  this.spacer = el("div", "timeline-spacer");
  this.canvas = el("canvas", "timeline-canvas");
  this.spacer.appendChild(this.canvas);
  this.scroll.appendChild(this.spacer);
  host.appendChild(this.scroll);
  this.lanes = [];
  this.cache = [];
  this.full = [0, 1];
  this.view = [0, 1];
  var pending = false;
  this.scroll.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; self.draw(); });
  });
  this.canvas.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = self.canvas.getBoundingClientRect();
    self.zoomBy(e.deltaY > 0 ? 1.25 : 0.8, (e.clientX - r.left) / r.width);
  }, { passive: false });
  var drag = null;
  this.canvas.addEventListener("mousedown", function (e) { drag = { x: e.clientX, view: self.view.slice(), moved: false }; });
  window.addEventListener("mouseup", function () { setTimeout(function () { drag = null; }, 0); });
  this.canvas.addEventListener("mousemove", function (e) {
    if (drag && e.buttons & 1) {
      var dx = e.clientX - drag.x;
      if (Math.abs(dx) > 2) drag.moved = true;
      var ns = -dx / self.canvas.clientWidth * (drag.view[1] - drag.view[0]);
      self.setView(drag.view[0] + ns, drag.view[1] + ns);
      tip.hide();
      return;
    }
    var h = self.hit(e);
    if (h) tip.show(e.clientX, e.clientY, h.tip); else tip.hide();
  });
  this.canvas.addEventListener("mouseleave", function () { tip.hide(); });
  this.canvas.addEventListener("mouseup", function (e) {
    if (drag && drag.moved) return;
    var h = self.hit(e);
    if (h && h.frame >= 0 && self.onSelect) self.onSelect(h.frame);
  });
}

// What drawing thread `ti` needs, computed once.
Timeline.prototype.lane = function (ti) {
  if (this.cache[ti]) return this.cache[ti];
  var th = D.threads[ti], tl = th.timeline, t = threadTree(ti), depth = t.depth();
  var n = tl.node.length, i, p, top = 0, least = Infinity, deepest = 0;
  for (i = 0; i < n; i++) {
    var d = depth[tl.node[i]];
    if (!d) continue;
    if (!top) top = tl.node[i];
    least = Math.min(least, d);
    deepest = Math.max(deepest, d);
  }
  // The frames every bucket has above it (fewer than the shallowest
  // bucket's, so that no bucket is wholly collapsed): the first bucket's
  // ancestors, cut where another bucket's differ.
  var prefix = top ? least - 1 : 0, seen = new Set();
  var at = function (q, k) { while (depth[q] > k) q = t.parent[q]; return q; };
  for (i = 0; i < n && prefix > 0; i++) {
    var q = tl.node[i];
    if (!depth[q] || seen.has(q)) continue;
    seen.add(q);
    while (prefix > 0 && at(q, prefix) !== at(top, prefix)) prefix--;
  }
  var rows = Math.max(1, Math.min(TL_ROWS, deepest - prefix)), last = prefix + rows;
  var cap = new Int32Array(t.n);
  for (i = 1; i < t.n; i++) cap[i] = depth[i] <= last ? i : cap[t.parent[i]];
  // Each bucket's path below the common frames, outermost first.
  var paths = new Int32Array(n * rows);
  for (i = 0; i < n; i++) {
    for (p = cap[tl.node[i]]; depth[p] > prefix; p = t.parent[p]) paths[i * rows + depth[p] - prefix - 1] = p;
  }
  var sums = function (pairs) {
    var out = new Float64Array(n + 1), v = new Float64Array(n);
    for (var j = 0; j < pairs.length; j += 2) v[pairs[j]] = pairs[j + 1];
    for (j = 0; j < n; j++) out[j + 1] = out[j] + v[j];
    return out;
  };
  var name = th.pid + ":" + th.tid + (th.name ? " " + th.name : "");
  if (prefix) {
    var common = at(top, prefix);
    name += "  \u2014 " + prefix + (prefix === 1 ? " frame" : " frames") + " above every bucket, ending in " + frameName(t.frame[common]);
  }
  var cpuH = tl.cpu ? TL_CPU : 0, offH = tl.off.length ? TL_OFF : 0;
  // (sampling with --off-cpu: per bucket, the stack of the off-CPU period
  // that covered most of it, whether it was preempted, and its length)
  var offStack = null;
  if (tl.off_stack && tl.off_stack.length) {
    offStack = { node: new Int32Array(n).fill(-1), preempted: new Uint8Array(n), ns: new Float64Array(n) };
    for (i = 0; 2 * i < tl.off.length; i++) {
      var ob = tl.off[2 * i];
      offStack.node[ob] = tl.off_stack[3 * i];
      offStack.preempted[ob] = tl.off_stack[3 * i + 1];
      offStack.ns[ob] = tl.off_stack[3 * i + 2];
    }
  }
  return (this.cache[ti] = {
    ti: ti, name: name, tl: tl, t: t, depth: depth, paths: paths, rows: rows, prefix: prefix, offStack: offStack,
    off: sums(tl.off), cpu: tl.cpu ? sums(tl.cpu) : null, cpuY: TL_HEAD, offY: TL_HEAD + cpuH,
    rowsY: TL_HEAD + cpuH + offH, height: TL_HEAD + cpuH + offH + rows * TL_ROW + TL_GAP
  });
};

Timeline.prototype.set = function (threads, matches, selected) {
  var self = this, y = 0, lo = Infinity, hi = -Infinity;
  this.lanes = threads.map(function (ti) {
    var l = self.lane(ti);
    l.y = y;
    y += l.height;
    if (l.tl.node.length) {
      lo = Math.min(lo, l.tl.start);
      hi = Math.max(hi, l.tl.end);
    }
    return l;
  });
  if (!(hi > lo)) { lo = 0; hi = 1; }
  var changed = this.full[0] !== lo || this.full[1] !== hi;
  this.full = [lo, hi];
  this.matches = matches;
  this.selected = selected;
  this.spacer.style.height = TL_AXIS + y + "px";
  // (for the browser tests: what each lane shows, common frames + rows,
  // and where the first lane's CPU graph and rows start on the canvas)
  this.host.setAttribute("data-lanes", this.lanes.map(function (l) { return l.prefix + "+" + l.rows; }).join(" "));
  if (this.lanes.length) {
    var l0 = this.lanes[0];
    this.host.setAttribute("data-lane-y", [TL_AXIS + l0.cpuY, TL_AXIS + l0.rowsY, TL_CPU, TL_ROW].join(" "));
    this.host.setAttribute("data-off-y", l0.tl.off.length ? String(TL_AXIS + l0.offY + TL_OFF / 2) : "");
  }
  if (changed) this.setView(lo, hi); else this.draw();
};

Timeline.prototype.setView = function (a, b) {
  var f = this.full, span = Math.max(b - a, Math.min(1000, f[1] - f[0]));
  span = Math.min(span, f[1] - f[0]);
  a = Math.max(f[0], Math.min(a, f[1] - span));
  this.view = [a, a + span];
  this.host.setAttribute("data-view", Math.round(this.view[0]) + ":" + Math.round(this.view[1]));
  var bucket = Infinity;
  this.lanes.forEach(function (l) {
    if (l.tl.node.length) bucket = Math.min(bucket, (l.tl.end - l.tl.start) / l.tl.node.length);
  });
  this.label.textContent = "Showing " + fmtNs(this.view[0]) + " \u2013 " + fmtNs(this.view[1]) +
    " (" + fmtNs(span) + ")" + (bucket < Infinity ? "; finest detail " + fmtNs(bucket) + " per bucket" : "") +
    ". Wheel or buttons to zoom, drag to pan; each bar is the call path that took most of its time.";
  this.draw();
};

Timeline.prototype.zoomBy = function (factor, at) {
  var v = this.view, span = v[1] - v[0], pivot = v[0] + span * at, s = span * factor;
  this.setView(pivot - s * at, pivot - s * at + s);
};

// The bucket of lane `l` under pixel column x (of `width`), or -1.
Timeline.prototype.bucketAt = function (l, x, width) {
  var v = this.view, t = v[0] + (x + 0.5) * (v[1] - v[0]) / width, tl = l.tl, n = tl.node.length;
  if (!n || t < tl.start || t >= tl.end) return -1;
  return Math.min(n - 1, Math.floor((t - tl.start) / (tl.end - tl.start) * n));
};

Timeline.prototype.draw = function () {
  var width = this.scroll.clientWidth;
  if (!width) return;
  var total = TL_AXIS + this.lanes.reduce(function (s, l) { return s + l.height; }, 0);
  var height = Math.min(this.scroll.clientHeight || total, total), top = this.scroll.scrollTop;
  var ctx = fitCanvas(this.canvas, width, height);
  ctx.clearRect(0, 0, width, height);
  ctx.font = "10px monospace";
  ctx.textBaseline = "middle";
  var marks = 0;
  for (var k = 0; k < this.lanes.length; k++) {
    var l = this.lanes[k], y = TL_AXIS + l.y - top;
    if (y + l.height < TL_AXIS || y > height) continue;
    this.drawLane(ctx, l, y, width);
    marks += this.drawMarks(ctx, l, y, width);
  }
  // (for the browser tests: how many marks the view shows)
  this.host.setAttribute("data-marks", String(marks));
  this.drawAxis(ctx, width);
};

Timeline.prototype.drawLane = function (ctx, l, y, width) {
  var R = l.rows, t = l.t, v = this.view, m = this.matches;
  ctx.fillStyle = "#333";
  ctx.font = "bold 11px system-ui, sans-serif";
  ctx.fillText(l.name, 4, y + TL_HEAD / 2);
  ctx.font = "10px monospace";
  var offY = y + l.offY, rowsY = y + l.rowsY, cpuY = y + l.cpuY;
  if (l.cpu) {
    ctx.fillStyle = "#eef5ee";
    ctx.fillRect(0, cpuY, width, TL_CPU - 2);
  }
  ctx.fillStyle = "#f4f4f4";
  ctx.fillRect(0, rowsY, width, R * TL_ROW);
  // The recording's paused stretches: nothing was recorded there.
  ctx.fillStyle = "#dcdcdc";
  for (var pi = 0; pi < D.paused.length; pi++) {
    var px0 = Math.max(0, (D.paused[pi][0] - v[0]) / (v[1] - v[0]) * width);
    var px1 = Math.min(width, (D.paused[pi][1] - v[0]) / (v[1] - v[0]) * width);
    if (px1 > px0) ctx.fillRect(px0, rowsY, Math.max(1, px1 - px0), R * TL_ROW);
  }
  var paths = new Int32Array(width * R);
  var pxNs = (v[1] - v[0]) / width, tl = l.tl, n = tl.node.length, span = tl.end - tl.start;
  for (var x = 0; x < width; x++) {
    var b = this.bucketAt(l, x, width);
    if (b < 0) continue;
    // Off-CPU share over the buckets this pixel covers.
    var t0 = v[0] + x * pxNs, b0 = Math.max(0, Math.floor((t0 - tl.start) / span * n));
    var b1 = Math.min(n - 1, Math.max(b0, Math.floor((t0 + pxNs - tl.start) / span * n)));
    var off = (l.off[b1 + 1] - l.off[b0]) / (b1 - b0 + 1);
    if (l.cpu) {
      // CPU usage as a graph: the bar's height is the share of the time sampled
      var use = (l.cpu[b1 + 1] - l.cpu[b0]) / (b1 - b0 + 1) / 1000;
      if (use > 0) {
        var h = Math.max(1, Math.round(use * (TL_CPU - 3)));
        ctx.fillStyle = "#3f9a4a";
        ctx.fillRect(x, cpuY + TL_CPU - 2 - h, 1, h);
      }
    }
    if (off > 0) {
      ctx.fillStyle = "rgba(90,70,160," + (0.25 + 0.75 * off / 1000).toFixed(3) + ")";
      ctx.fillRect(x, offY + 1, 1, TL_OFF - 2);
    }
    if (b1 - b0 < 2) {
      for (var r = 0; r < R; r++) paths[r * width + x] = l.paths[b * R + r];
    } else {
      dominantPath(l, b0, b1, paths, x, width);
    }
  }
  for (r = 0; r < R; r++) {
    var ry = rowsY + r * TL_ROW, o = r * width;
    for (x = 0; x < width;) {
      var node = paths[o + x], end = x + 1;
      while (end < width && paths[o + end] === node) end++;
      if (node > 0) {
        var f = t.frame[node], name = frameName(f);
        ctx.fillStyle = frameColor(name, m ? (m[f] ? "match" : "dim") : "");
        ctx.fillRect(x, ry, end - x, TL_ROW - 1);
        if (f === this.selected) {
          ctx.strokeStyle = "#222";
          ctx.strokeRect(x + 0.5, ry + 0.5, end - x - 1, TL_ROW - 2);
        }
        var label = fitText(ctx, name, end - x - 4);
        if (label) {
          ctx.fillStyle = "#111";
          ctx.fillText(label, x + 2, ry + TL_ROW / 2);
        }
      }
      x = end;
    }
  }
};

// The program's marks on lane `l`: a line across the lane and the text
// beside it in the lane's head.
Timeline.prototype.drawMarks = function (ctx, l, y, width) {
  var v = this.view, marks = D.threads[l.ti].marks, shown = 0;
  // (a text never covers the lane's name: it starts after it)
  ctx.font = "bold 11px system-ui, sans-serif";
  var free = 4 + ctx.measureText(l.name).width + 6;
  ctx.font = "10px system-ui, sans-serif";
  for (var i = 0; i < marks.length; i++) {
    var x = Math.round((marks[i][0] - v[0]) / (v[1] - v[0]) * width);
    if (x < 0 || x >= width) continue;
    ctx.fillStyle = "#d2691e";
    ctx.fillRect(x, y + 2, 1, l.height - TL_GAP - 2);
    ctx.beginPath();
    ctx.moveTo(x - 4, y + 2);
    ctx.lineTo(x + 5, y + 2);
    ctx.lineTo(x + 0.5, y + 8);
    ctx.fill();
    ctx.fillText(marks[i][1], Math.max(x + 6, free), y + TL_HEAD / 2);
    shown++;
  }
  return shown;
};

Timeline.prototype.drawAxis = function (ctx, width) {
  var v = this.view, span = v[1] - v[0];
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, TL_AXIS);
  ctx.strokeStyle = "#bbb";
  ctx.beginPath();
  ctx.moveTo(0, TL_AXIS - 0.5);
  ctx.lineTo(width, TL_AXIS - 0.5);
  ctx.stroke();
  var raw = span / 8, step = Math.pow(10, Math.floor(Math.log10(raw)));
  if (raw / step >= 5) step *= 5; else if (raw / step >= 2) step *= 2;
  ctx.fillStyle = "#555";
  ctx.font = "10px system-ui, sans-serif";
  for (var tick = Math.ceil(v[0] / step) * step; tick <= v[1]; tick += step) {
    var x = (tick - v[0]) / span * width;
    ctx.fillRect(x, TL_AXIS - 6, 1, 6);
    ctx.fillText(fmtNs(tick), x + 3, TL_AXIS / 2);
  }
};

// What is under the pointer: {tip: lines, frame}.
Timeline.prototype.hit = function (e) {
  var rect = this.canvas.getBoundingClientRect(), x = Math.floor(e.clientX - rect.left);
  var y = e.clientY - rect.top + this.scroll.scrollTop - TL_AXIS;
  for (var k = 0; k < this.lanes.length; k++) {
    var l = this.lanes[k];
    if (y < l.y || y >= l.y + l.height) continue;
    var b = this.bucketAt(l, x, rect.width);
    if (b < 0) return null;
    var tl = l.tl, n = tl.node.length, bw = (tl.end - tl.start) / n;
    if (l.offStack && y >= l.y + l.offY && y < l.y + l.offY + TL_OFF) {
      var off = this.offHit(l, x, rect.width);
      if (off) return off;
    }
    var node = tl.node[b], row = Math.floor((y - l.y - l.rowsY) / TL_ROW);
    var lines = [l.name + " at " + fmtNs(tl.start + (b + 0.5) * bw),
      "bucket " + fmtNs(tl.start + b * bw) + " \u2013 " + fmtNs(tl.start + (b + 1) * bw) +
        (l.cpu ? ", CPU " + ((l.cpu[b + 1] - l.cpu[b]) / 10).toFixed(1) + "%" : "") +
        (tl.off.length ? ", off-CPU " + ((l.off[b + 1] - l.off[b]) / 10).toFixed(1) + "%" : "")];
    var frame = -1, path = [], p = node;
    while (p > 0) {
      if (row >= 0 && l.depth[p] === row + 1 + l.prefix) frame = l.t.frame[p];
      if (path.length < 16) path.push(frameName(l.t.frame[p]));
      p = l.t.parent[p];
    }
    if (!node) lines.push("no function on the stack for most of it");
    else {
      lines.push("stack (" + l.depth[node] + " deep, innermost first):");
      path.forEach(function (s) { lines.push("  " + s); });
      if (l.depth[node] > path.length) lines.push("  \u2026");
    }
    return { tip: lines, frame: frame };
  }
  return null;
};

// The off-CPU strip of lane l under pixel column x: of the buckets the
// pixel covers, the one most off the CPU, told by the stack its longest
// off-CPU period waited in; the frame is that stack's innermost (clicking
// selects it, as clicking a sampled frame does). Null where none.
Timeline.prototype.offHit = function (l, x, width) {
  var v = this.view, tl = l.tl, n = tl.node.length, span = tl.end - tl.start, pxNs = (v[1] - v[0]) / width;
  var t0 = v[0] + x * pxNs, b0 = Math.max(0, Math.floor((t0 - tl.start) / span * n));
  var b1 = Math.min(n - 1, Math.max(b0, Math.floor((t0 + pxNs - tl.start) / span * n)));
  var b = -1, most = 0;
  for (var i = b0; i <= b1; i++) {
    var share = l.off[i + 1] - l.off[i];
    if (l.offStack.node[i] >= 0 && share > most) { most = share; b = i; }
  }
  if (b < 0) return null;
  var s = l.offStack, node = s.node[b], bw = span / n, lines = [
    l.name + " at " + fmtNs(tl.start + (b + 0.5) * bw),
    "off-CPU " + (most / 10).toFixed(1) + "% of " + fmtNs(tl.start + b * bw) + " \u2013 " + fmtNs(tl.start + (b + 1) * bw),
    (s.preempted[b] ? "preempted (runnable, waiting for a CPU)" : "blocked (waiting)") + " for " + fmtNs(s.ns[b]) + " in:"];
  var frame = -1, path = [];
  for (var p = node; p > 0; p = l.t.parent[p]) {
    if (frame < 0) frame = l.t.frame[p];
    if (path.length < 16) path.push(frameName(l.t.frame[p]));
  }
  if (!node) lines.push("  (no stack unwound)");
  else {
    path.forEach(function (f) { lines.push("  " + f); });
    if (l.depth[node] > path.length) lines.push("  \u2026");
  }
  return { tip: lines, frame: frame };
};

// The dominant path over buckets b0..b1 of lane l (at most 24 of them
// looked at, evenly spread), written into column x of `out`.
var domCand = new Int32Array(24), domKeys = new Int32Array(24), domCounts = new Int32Array(24);
function dominantPath(l, b0, b1, out, x, width) {
  var R = l.rows, paths = l.paths, nc = 0, step = Math.max(1, (b1 - b0 + 1) / 24);
  for (var f = b0; f <= b1 && nc < 24; f += step) domCand[nc++] = Math.floor(f);
  for (var r = 0; r < R && nc > 0; r++) {
    var nk = 0, best = 0, bestN = 0;
    for (var i = 0; i < nc; i++) {
      var key = paths[domCand[i] * R + r], k = 0;
      while (k < nk && domKeys[k] !== key) k++;
      if (k === nk) { domKeys[nk] = key; domCounts[nk++] = 0; }
      if (++domCounts[k] > bestN) { bestN = domCounts[k]; best = key; }
    }
    if (!best) return;
    out[r * width + x] = best;
    var kept = 0;
    for (i = 0; i < nc; i++) if (paths[domCand[i] * R + r] === best) domCand[kept++] = domCand[i];
    nc = kept;
  }
}
