// vlist.js: the list, tree and table widgets. Only the rows in view are
// in the DOM (fixed row height), so a table of 100,000 functions or a
// 20,000-deep expanded recursion scrolls like ten rows.

var ROW_H = 20;

// A scrolling box: `head` (kept in view at the top) then the rows, of
// which only those in view are made by render(i).
function VList(box, head, render) {
  this.host = box;
  this.render = render;
  this.count = 0;
  box.classList.add("vlist");
  box.tabIndex = 0;
  if (head) box.appendChild(head);
  this.spacer = el("div", "vlist-spacer");
  box.appendChild(this.spacer);
  var self = this, pending = false;
  box.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; self.draw(); });
  });
}

VList.prototype.setCount = function (n) {
  this.count = n;
  this.host.setAttribute("data-rows", n);
  this.spacer.style.height = n * ROW_H + "px";
  this.draw();
};

VList.prototype.draw = function () {
  var top = Math.max(0, this.host.scrollTop - this.spacer.offsetTop), h = this.host.clientHeight || 600;
  var first = Math.max(0, Math.floor(top / ROW_H) - 4);
  var last = Math.min(this.count, Math.ceil((top + h) / ROW_H) + 4);
  clear(this.spacer);
  for (var i = first; i < last; i++) {
    var row = this.render(i);
    row.style.top = i * ROW_H + "px";
    this.spacer.appendChild(row);
  }
};

VList.prototype.reveal = function (i) {
  var off = this.spacer.offsetTop, top = off + i * ROW_H, h = this.host.clientHeight || 600;
  if (top - off < this.host.scrollTop) this.host.scrollTop = top - off;
  else if (top + ROW_H > this.host.scrollTop + h) this.host.scrollTop = top + ROW_H - h;
  this.draw();
};

function gridOf(columns) {
  return columns.map(function (c) { return c.width || "90px"; }).join(" ");
}

// The columns' width in px, flexible ones (minmax(Npx, 1fr)) at their least.
function widthOf(columns) {
  return pxOf(columns.map(function (c) { return c.width || "90px"; }));
}

function pxOf(widths) {
  var w = 0;
  for (var i = 0; i < widths.length; i++) {
    var m = /(\d+)px/.exec(widths[i]);
    w += m ? Number(m[1]) : 90;
  }
  return w;
}

// Numbers are never cut: a number column widens to the longest text it
// has shown (measured once per new longest length, so scrolling a long
// table measures a few cells, not every one). Name columns keep their
// width (a long name ends in an ellipsis; its tooltip has it whole).
var fitCtx = null;
function textWidth(s) {
  if (!fitCtx) {
    fitCtx = document.createElement("canvas").getContext("2d");
    fitCtx.font = "13px " + getComputedStyle(document.body).fontFamily;
  }
  return fitCtx.measureText(s).width;
}

function Fitter(columns) {
  this.widths = columns.map(function (c) { return c.width || "90px"; });
  this.longest = columns.map(function (c) { return c.text ? Infinity : 0; });
  this.grid = this.widths.join(" ");
}

// Whether column c had to widen to show `text` whole.
Fitter.prototype.fit = function (c, text) {
  text = String(text);
  var m = /^(\d+)px$/.exec(this.widths[c]);
  if (!m || text.length <= this.longest[c]) return false;
  this.longest[c] = text.length;
  // (the cell's padding, 6px a side, and a little for the font's rounding)
  var need = Math.ceil(textWidth(text) * 1.05) + 14;
  if (need <= Number(m[1])) return false;
  this.widths[c] = need + "px";
  this.grid = this.widths.join(" ");
  return true;
};

// Gives the header and the rows shown the fitter's grid.
function regrid(head, spacer, fitter, minWidth) {
  head.style.gridTemplateColumns = fitter.grid;
  var least = pxOf(fitter.widths) + "px";
  if (minWidth) {
    head.style.minWidth = least;
    spacer.style.minWidth = least;
  } else {
    head.style.width = least;
    spacer.style.width = least;
  }
  for (var r = spacer.firstChild; r; r = r.nextSibling) r.style.gridTemplateColumns = fitter.grid;
}

function headerRow(columns, onClick) {
  var head = el("div", "vhead");
  head.style.gridTemplateColumns = gridOf(columns);
  columns.forEach(function (c, i) {
    var h = el("div", "cell" + (c.text ? " text" : ""), c.label);
    if (c.title) h.title = c.title;
    h.setAttribute("data-col", c.key || String(i));
    if (onClick) h.onclick = function () { onClick(i); };
    head.appendChild(h);
  });
  return head;
}

// ---- tree ----
// `p` provides: roots() (ids), kids(id) (ids, heaviest first), cells(id)
// (strings after the name), frame(id), hot(id), tip(id) (lines). The rows
// shown are rebuilt from the set of open ids by an iterative pre-order
// walk, so opening a 20,000-deep path costs one walk.
function TreeView(host, columns, p, onSelect) {
  this.p = p;
  this.onSelect = onSelect;
  this.columns = columns;
  this.fitter = new Fitter(columns);
  clear(host);
  this.roots = [];
  this.openSet = new Set();
  this.ids = [];
  this.depth = [];
  this.selected = null;
  var self = this, head = headerRow(columns), least = widthOf(columns) + "px";
  head.style.minWidth = least;
  this.head = head;
  this.list = new VList(host, head, function (i) { return self.row(i); });
  this.list.spacer.style.minWidth = least;
  host.addEventListener("keydown", function (e) { self.key(e); });
}

TreeView.prototype.setRoots = function (roots, open) {
  this.roots = Array.prototype.slice.call(roots);
  this.openSet = new Set(open || []);
  this.selected = null;
  this.list.host.scrollTop = 0;
  this.rebuild();
};

TreeView.prototype.rebuild = function () {
  var ids = [], depth = [], stack = [];
  for (var r = this.roots.length - 1; r >= 0; r--) stack.push(this.roots[r], 0);
  while (stack.length) {
    var d = stack.pop(), id = stack.pop();
    ids.push(id);
    depth.push(d);
    if (this.openSet.has(id)) {
      var kids = this.p.kids(id);
      for (var k = kids.length - 1; k >= 0; k--) stack.push(kids[k], d + 1);
    }
  }
  this.ids = ids;
  this.depth = depth;
  this.list.setCount(ids.length);
};

TreeView.prototype.hasKids = function (i) { return this.p.kids(this.ids[i]).length > 0; };
TreeView.prototype.isOpen = function (i) { return this.openSet.has(this.ids[i]); };

TreeView.prototype.expand = function (i) {
  if (this.isOpen(i) || !this.hasKids(i)) return;
  this.openSet.add(this.ids[i]);
  this.rebuild();
};

TreeView.prototype.collapse = function (i) {
  if (!this.isOpen(i)) return;
  this.openSet.delete(this.ids[i]);
  this.rebuild();
};

// Opens row i and everything below it, up to `limit` nodes.
TreeView.prototype.expandAll = function (i, limit) {
  var stack = [this.ids[i]], n = 0;
  limit = limit || 200000;
  while (stack.length && n < limit) {
    var id = stack.pop(), kids = this.p.kids(id);
    if (!kids.length) continue;
    this.openSet.add(id);
    n += kids.length;
    for (var k = 0; k < kids.length; k++) stack.push(kids[k]);
  }
  this.rebuild();
};

// Opens every id of `path` (from a root down).
TreeView.prototype.expandPath = function (path) {
  for (var k = 0; k < path.length; k++) this.openSet.add(path[k]);
  this.rebuild();
};

TreeView.prototype.indexOf = function (id) {
  return id === null ? -1 : this.ids.indexOf(id);
};

TreeView.prototype.select = function (i) {
  if (i < 0 || i >= this.ids.length) return;
  this.selected = this.ids[i];
  this.list.reveal(i);
  if (this.onSelect) this.onSelect(this.p.frame(this.ids[i]));
};

TreeView.prototype.row = function (i) {
  var self = this, id = this.ids[i], d = this.depth[i], open = this.isOpen(i);
  var row = el("div", "vrow tree-row" + (id === this.selected ? " sel" : "") + (this.p.hot(id) ? " hot" : ""));
  row.setAttribute("data-row", i);
  row.setAttribute("data-depth", d);
  var name = el("div", "cell text name");
  name.style.paddingLeft = 4 + Math.min(d, 40) * 14 + "px";
  var twisty = el("span", "twisty", this.hasKids(i) ? (open ? "\u25be" : "\u25b8") : "");
  twisty.onclick = function (e) {
    e.stopPropagation();
    if (open) self.collapse(i); else self.expand(i);
  };
  name.appendChild(twisty);
  if (d > 40) name.appendChild(el("span", "deep", "\u2026" + d + " "));
  var f = this.p.frame(id);
  if (isDominated(f)) {
    var mark = el("span", "pd", "~ ");
    mark.title = DOMINATED_TIP;
    name.appendChild(mark);
  }
  name.appendChild(el("span", "fname", frameName(f)));
  var mod = frameModule(f);
  if (mod) name.appendChild(el("span", "module", " " + mod));
  row.appendChild(name);
  var cells = this.p.cells(id), wider = false;
  for (var c = 0; c < cells.length; c++) {
    row.appendChild(el("div", "cell", cells[c]));
    if (this.fitter.fit(c + 1, cells[c])) wider = true;
  }
  if (wider) regrid(this.head, this.list.spacer, this.fitter, true);
  row.style.gridTemplateColumns = this.fitter.grid;
  row.onclick = function () { self.select(i); self.list.draw(); };
  row.ondblclick = function () { if (open) self.collapse(i); else self.expand(i); };
  row.onmousemove = function (e) { tip.show(e.clientX, e.clientY, self.p.tip(id)); };
  row.onmouseleave = function () { tip.hide(); };
  return row;
};

TreeView.prototype.key = function (e) {
  var i = this.indexOf(this.selected);
  if (e.key === "ArrowDown") this.select(Math.min(this.ids.length - 1, i + 1));
  else if (e.key === "ArrowUp") this.select(Math.max(0, i - 1));
  else if (e.key === "ArrowRight" && i >= 0) this.expand(i);
  else if (e.key === "ArrowLeft" && i >= 0) {
    if (this.isOpen(i)) this.collapse(i);
    else {
      var j = i - 1;
      while (j >= 0 && this.depth[j] >= this.depth[i]) j--;
      if (j >= 0) this.select(j);
    }
  } else if (e.key === "*" && i >= 0) this.expandAll(i);
  else return;
  e.preventDefault();
  this.list.draw();
};

// ---- sortable table ----
// columns: {key, label, text, width, get(row) (sort value), fmt(row),
// tip(row) (a cell's tooltip, optional)}.
function TableView(host, columns, sortCol, onSelect) {
  this.columns = columns;
  this.sortCol = sortCol;
  this.desc = !columns[sortCol].text;
  this.rows = [];
  this.onSelect = onSelect;
  this.selected = null;
  this.fitter = new Fitter(columns);
  clear(host);
  var self = this;
  this.head = headerRow(columns, function (c) {
    if (self.sortCol === c) self.desc = !self.desc;
    else {
      self.sortCol = c;
      self.desc = !columns[c].text;
    }
    self.sort();
  });
  var width = widthOf(columns);
  if (width) this.head.style.width = width + "px";
  this.list = new VList(host, this.head, function (i) { return self.row(i); });
  if (width) this.list.spacer.style.width = width + "px";
}

TableView.prototype.setRows = function (rows) {
  this.rows = rows.slice();
  this.sort();
};

TableView.prototype.sort = function () {
  var c = this.columns[this.sortCol], sign = this.desc ? -1 : 1;
  this.rows.sort(function (a, b) {
    var x = c.get(a), y = c.get(b);
    var r = c.text ? String(x).localeCompare(String(y)) : (x || 0) - (y || 0);
    return sign * r;
  });
  var heads = this.head.children;
  for (var i = 0; i < heads.length; i++) {
    heads[i].classList.toggle("sorted", i === this.sortCol);
    heads[i].classList.toggle("asc", i === this.sortCol && !this.desc);
  }
  this.list.setCount(this.rows.length);
};

TableView.prototype.row = function (i) {
  var self = this, r = this.rows[i];
  var row = el("div", "vrow table-row" + (r === this.selected ? " sel" : ""));
  row.setAttribute("data-row", i);
  var fitter = this.fitter, wider = false;
  this.columns.forEach(function (c, k) {
    var text = c.fmt(r);
    var cell = el("div", "cell" + (c.text ? " text" : ""), text);
    if (c.tip) {
      var t = c.tip(r);
      if (t) cell.title = t;
    }
    row.appendChild(cell);
    if (fitter.fit(k, text)) wider = true;
  });
  if (wider) regrid(this.head, this.list.spacer, fitter, false);
  row.style.gridTemplateColumns = fitter.grid;
  row.onclick = function () {
    self.selected = r;
    self.list.draw();
    if (self.onSelect) self.onSelect(r);
  };
  return row;
};
