// flame.js: the flame graph of a call tree, drawn on a canvas as an
// icicle (callers above their callees, as speedscope and the Firefox
// Profiler draw it; width = inclusive value, heaviest child first). Only
// the rows in view are drawn, so a 20,000-deep tree scrolls like a
// shallow one. Click a frame to zoom to it; click the top row to zoom out.

var FLAME_ROW = 18;

function Flame(host, onSelect) {
  this.host = host;
  this.onSelect = onSelect;
  clear(host);
  var bar = el("div", "bar");
  var reset = el("button", "", "Reset zoom");
  reset.type = "button";
  reset.id = "flame-reset";
  bar.appendChild(reset);
  this.note = el("span", "note");
  bar.appendChild(this.note);
  host.appendChild(bar);
  this.scroll = el("div", "flame-scroll");
  this.spacer = el("div", "flame-spacer");
  this.canvas = el("canvas", "flame-canvas");
  this.spacer.appendChild(this.canvas);
  this.scroll.appendChild(this.spacer);
  host.appendChild(this.scroll);
  this.t = null;
  var self = this, pending = false;
  reset.onclick = function () { self.zoom(0); };
  this.scroll.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; self.draw(); });
  });
  this.canvas.addEventListener("mousemove", function (e) {
    var i = self.hit(e);
    if (i < 0) { tip.hide(); return; }
    tip.show(e.clientX, e.clientY, nodeTip(self.t, i, self.mode));
  });
  this.canvas.addEventListener("mouseleave", function () { tip.hide(); });
  this.canvas.addEventListener("click", function (e) {
    var i = self.hit(e);
    if (i < 0) return;
    self.zoom(i);
    if (i > 0 && self.onSelect) self.onSelect(self.t.frame[i]);
  });
}

// Shows tree `t` in `mode`; `matches` (or null) marks search hits,
// `selected` a frame to outline.
Flame.prototype.set = function (t, mode, matches, selected, rootName) {
  if (t === this.t && mode === this.mode) {
    // Same tree: keep the zoom, update the marks.
    this.matches = matches;
    this.selected = selected;
    this.draw();
    return;
  }
  var n = t.n, w = t.v[inclKey(mode)], total = w[0] || 1;
  var x = new Float64Array(n), k = t.kids(mode), depth = t.depth(), maxDepth = 0;
  for (var i = 0; i < n; i++) {
    var off = x[i];
    for (var j = k.start[i]; j < k.start[i + 1]; j++) {
      var c = k.ids[j];
      x[c] = off;
      off += w[c] / total;
    }
    if (depth[i] > maxDepth) maxDepth = depth[i];
  }
  // Nodes by depth, for drawing only the rows in view.
  var start = new Int32Array(maxDepth + 2);
  for (i = 0; i < n; i++) start[depth[i] + 1]++;
  for (i = 1; i < start.length; i++) start[i] += start[i - 1];
  var fill = start.slice(0, maxDepth + 1), byDepth = new Int32Array(n);
  for (i = 0; i < n; i++) byDepth[fill[depth[i]]++] = i;
  this.t = t;
  this.mode = mode;
  this.x = x;
  this.w = w;
  this.total = total;
  this.depthStart = start;
  this.byDepth = byDepth;
  this.rows = maxDepth + 1;
  this.matches = matches;
  this.selected = selected;
  this.rootName = rootName || "all";
  this.spacer.style.height = this.rows * FLAME_ROW + "px";
  this.zoomNode = 0;
  this.host.setAttribute("data-zoom", 0);
  this.note.textContent = (INSTR ? (mode === "a" ? "Width: application inclusive time. " : "Width: elapsed inclusive time. ") :
    "Width: inclusive samples. ") + "Click a frame to zoom in and select it; " + fmtInt(n - 1) + " call paths, " + maxDepth + " deep." +
    (w[0] > 0 ? "" : " Nothing to draw: the chosen threads have no " + (INSTR ? "time" : "samples") + " in functions.");
  this.draw();
};

Flame.prototype.zoom = function (i) {
  this.zoomNode = i;
  this.host.setAttribute("data-zoom", i);
  var y = this.t.depth()[i] * FLAME_ROW, s = this.scroll;
  if (y < s.scrollTop || y + FLAME_ROW > s.scrollTop + s.clientHeight) s.scrollTop = Math.max(0, y - 3 * FLAME_ROW);
  this.draw();
};

Flame.prototype.range = function () {
  var z = this.zoomNode;
  return [this.x[z], Math.max(this.w[z] / this.total, 1e-12)];
};

Flame.prototype.draw = function () {
  if (!this.t || !this.scroll.clientWidth) return;
  var width = this.scroll.clientWidth, height = Math.min(this.scroll.clientHeight, this.rows * FLAME_ROW);
  this.canvas.style.top = "0px";
  var ctx = fitCanvas(this.canvas, width, height);
  var top = this.scroll.scrollTop, r = this.range(), scale = width / r[1];
  ctx.clearRect(0, 0, width, height);
  ctx.font = "11px monospace";
  ctx.textBaseline = "middle";
  var first = Math.floor(top / FLAME_ROW), last = Math.min(this.rows - 1, Math.ceil((top + height) / FLAME_ROW));
  var t = this.t, m = this.matches;
  for (var d = first; d <= last; d++) {
    var y = d * FLAME_ROW - top;
    for (var j = this.depthStart[d]; j < this.depthStart[d + 1]; j++) {
      var i = this.byDepth[j], wpx = this.w[i] / this.total * scale;
      if (wpx < 0.4) continue;
      var xpx = (this.x[i] - r[0]) * scale;
      if (xpx + wpx < 0 || xpx > width) continue;
      var f = t.frame[i], name = i === 0 ? this.rootName : frameName(f);
      ctx.fillStyle = frameColor(name, m && i > 0 ? (m[f] ? "match" : "dim") : "");
      var x0 = Math.max(0, xpx), x1 = Math.min(width, xpx + wpx);
      ctx.fillRect(x0, y, Math.max(0.5, x1 - x0 - (wpx > 3 ? 1 : 0)), FLAME_ROW - 1);
      if (i > 0 && f === this.selected) {
        ctx.strokeStyle = "#222";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 + 1, y + 1, Math.max(1, x1 - x0 - 2), FLAME_ROW - 3);
      }
      var label = fitText(ctx, name, x1 - x0 - 6);
      if (label) {
        ctx.fillStyle = "#111";
        ctx.fillText(label, x0 + 3, y + FLAME_ROW / 2);
      }
    }
  }
};

// The node under the pointer, or -1.
Flame.prototype.hit = function (e) {
  if (!this.t) return -1;
  var rect = this.canvas.getBoundingClientRect();
  var px = e.clientX - rect.left, py = e.clientY - rect.top + this.scroll.scrollTop;
  var d = Math.floor(py / FLAME_ROW);
  if (d < 0 || d >= this.rows) return -1;
  var r = this.range(), scale = rect.width / r[1];
  for (var j = this.depthStart[d]; j < this.depthStart[d + 1]; j++) {
    var i = this.byDepth[j], xpx = (this.x[i] - r[0]) * scale, wpx = this.w[i] / this.total * scale;
    if (px >= xpx && px < xpx + wpx && wpx >= 0.4) return i;
  }
  return -1;
};
