// util.js: small helpers every part of the page uses (DOM, number
// formats, colours, the tooltip).

function el(tag, cls, text) {
  var e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

// Nanoseconds in human units, three significant digits.
function fmtNs(v) {
  if (v === null || v === undefined || isNaN(v)) return "-";
  if (v < 1000) return Math.round(v) + " ns";
  var units = [[3600e9, "h"], [60e9, "min"], [1e9, "s"], [1e6, "ms"], [1e3, "\u00b5s"]];
  for (var i = 0; i < units.length; i++) {
    if (v >= units[i][0]) {
      var x = v / units[i][0];
      return (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)) + " " + units[i][1];
    }
  }
  return v + " ns";
}

function fmtPct(part, whole) {
  if (!(whole > 0)) return "-";
  var p = 100 * part / whole;
  return (p >= 10 ? p.toFixed(1) : p.toFixed(2)) + "%";
}

function fmtInt(v) {
  if (v === null || v === undefined) return "-";
  return String(Math.round(v)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

// A stable small hash of a string (FNV-1a), for colours.
function hashString(s) {
  var h = 2166136261;
  for (var i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return h >>> 0;
}

// Warm flame-graph colours, stable per name; `state` is "match" (search
// hit), "dim" (a search is on and this is not a hit) or "" (no search).
var colorCache = Object.create(null);
function frameColor(name, state) {
  if (state === "match") return "#6a8cff";
  if (state === "dim") return "#e6e2dc";
  var c = colorCache[name];
  if (c) return c;
  var h = hashString(name);
  c = "hsl(" + (10 + h % 45) + "," + (70 + (h >>> 8) % 25) + "%," + (58 + (h >>> 16) % 14) + "%)";
  colorCache[name] = c;
  return c;
}

// The floating tooltip: lines of text near the pointer.
var tip = {
  box: null,
  show: function (x, y, lines) {
    if (!this.box) this.box = document.getElementById("tip");
    clear(this.box);
    for (var i = 0; i < lines.length; i++) this.box.appendChild(el("div", i === 0 ? "tip-title" : "", lines[i]));
    this.box.hidden = false;
    var w = this.box.offsetWidth, h = this.box.offsetHeight;
    var left = x + 14, top = y + 14;
    if (left + w > window.innerWidth - 4) left = Math.max(4, x - w - 10);
    if (top + h > window.innerHeight - 4) top = Math.max(4, y - h - 10);
    this.box.style.left = left + "px";
    this.box.style.top = top + "px";
  },
  hide: function () {
    if (this.box) this.box.hidden = true;
  }
};

// A canvas sized for the device's pixel ratio; returns its 2D context.
function fitCanvas(canvas, width, height) {
  var r = window.devicePixelRatio || 1;
  if (canvas.width !== Math.round(width * r) || canvas.height !== Math.round(height * r)) {
    canvas.width = Math.round(width * r);
    canvas.height = Math.round(height * r);
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
  }
  var ctx = canvas.getContext("2d");
  ctx.setTransform(r, 0, 0, r, 0, 0);
  return ctx;
}

// Text cut to fit `width` pixels (with an ellipsis), or "" if nothing fits.
function fitText(ctx, text, width) {
  if (width < 14) return "";
  if (ctx.measureText(text).width <= width) return text;
  var lo = 0, hi = text.length;
  while (lo < hi) {
    var mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(text.slice(0, mid) + "\u2026").width <= width) lo = mid; else hi = mid - 1;
  }
  return lo > 0 ? text.slice(0, lo) + "\u2026" : "";
}
