/* onnxaff report explorer: part of onnxaff (Apache-2.0), written for it, no library, nothing fetched.
 *
 * Signature plots (svg.sig, drawn complete by onnxaff/reports/svg.py): wheel to zoom (shift: depth only), drag to
 * pan, double-click or "reset zoom" to go back; click a legend entry to hide or show that model in every plot;
 * hover a point for its site; click it for the site's detail (per-chunk scores, op types, parameters, its
 * neighbourhood in the graph drawn). Scatter plots: hover a point. The data are the page's JSON block
 * (onnxaff/reports/explore.py); every text goes in as textContent, never as markup.
 */
(function () {
  "use strict";
  var holder = document.getElementById("onnxaff-data");
  var DATA = holder ? JSON.parse(holder.textContent) : {models: []};
  var anySvg = document.querySelector("svg");
  if (!anySvg) return;
  var NS = anySvg.namespaceURI;
  var hidden = {};
  var plots = [];

  function svgEl(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function htmlEl(tag, text, parent, cls) {
    var e = document.createElement(tag);
    if (text != null) e.textContent = text;
    if (cls) e.className = cls;
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmt(v) {
    if (v == null) return "\u2013";
    if (typeof v !== "number") return String(v);
    return Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : String(+v.toFixed(4));
  }
  function shape(dims) {  /* the symbolic batch dim as N, whatever its name (as the page's tables) */
    return dims.map(function (d, i) { return i === 0 && typeof d !== "number" ? "N" : d; }).join("\u00d7");
  }
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    var raw = (hi - lo) / count, power = Math.pow(10, Math.floor(Math.log10(raw))), step = 10 * power;
    [1, 2, 2.5, 5, 10].some(function (m) { if (m * power >= raw) { step = m * power; return true; } return false; });
    var out = [];
    for (var t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
    return out;
  }

  /* tooltips: the SVG <title> of a point becomes the text of one floating box (no native tooltip twice) */
  var tip = htmlEl("div", null, document.body);
  tip.id = "onnxaff-tip";
  function takeTitle(g) {
    var t = g.querySelector("title");
    if (!t) return;
    g.setAttribute("data-tip", t.textContent);
    t.parentNode.removeChild(t);
    g.addEventListener("mouseenter", function (ev) { tip.textContent = g.getAttribute("data-tip"); moveTip(ev); });
    g.addEventListener("mousemove", moveTip);
    g.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }
  function moveTip(ev) {
    tip.style.display = "block";
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth - 4) x = ev.clientX - tip.offsetWidth - 10;
    if (y + tip.offsetHeight > window.innerHeight - 4) y = ev.clientY - tip.offsetHeight - 10;
    tip.style.left = Math.max(2, x) + "px";
    tip.style.top = Math.max(2, y) + "px";
  }
  [].forEach.call(document.querySelectorAll("svg g.pt, svg g.spt"), takeTitle);

  /* one signature plot */
  function Plot(svg, n) {
    var f = svg.getAttribute("data-frame").split(" ").map(Number);
    this.svg = svg;
    this.metric = svg.getAttribute("data-metric");
    this.L = f[0]; this.T = f[1]; this.W = f[2]; this.H = f[3];
    this.home = {x0: f[4], x1: f[5], y0: f[6], y1: f[7]};
    this.view = Object.assign({}, this.home);
    var body = svg.querySelector("g.plot");
    var clip = svg.insertBefore(svgEl("defs", {}), svg.firstChild);
    svgEl("rect", {x: this.L - 6, y: this.T - 6, width: this.W + 12, height: this.H + 12},  /* edge markers whole */
          svgEl("clipPath", {id: "onnxaff-clip-" + n}, clip));
    body.setAttribute("clip-path", "url(#onnxaff-clip-" + n + ")");
    this.points = [].map.call(svg.querySelectorAll("g.pt"), function (g) {
      return {el: g, x: +g.getAttribute("data-x"), y: +g.getAttribute("data-y"),
              px: +g.getAttribute("data-px"), py: +g.getAttribute("data-py")};
    });
    this.lines = [].map.call(svg.querySelectorAll("polyline[data-xy]"), function (p) {
      return {el: p, xy: p.getAttribute("data-xy").split(" ").map(function (s) { return s.split(",").map(Number); })};
    });
    this.bars = [].slice.call(svg.querySelectorAll("line.bar"));
    this.ring = svgEl("circle", {r: 7.5, fill: "none", stroke: "#000", "stroke-width": 1.6, display: "none"}, body);
    this.selected = null;
    this.panel = null;
    var tools = htmlEl("div", null, null, "tools");
    var reset = htmlEl("button", "reset zoom", tools);
    reset.type = "button";
    htmlEl("span", "wheel: zoom (shift: depth only) \u00b7 drag: pan \u00b7 legend: hide or show a model \u00b7 " +
           "click a point: its site", tools);
    svg.parentNode.insertBefore(tools, svg);
    var self = this;
    reset.addEventListener("click", function () { self.reset(); });
    svg.addEventListener("dblclick", function () { self.reset(); });
    svg.addEventListener("wheel", function (ev) { self.wheel(ev); }, {passive: false});
    this.dragging = null;
    svg.addEventListener("pointerdown", function (ev) { self.down(ev); });
    svg.addEventListener("pointermove", function (ev) { self.move(ev); });
    svg.addEventListener("pointerup", function (ev) { self.up(ev); });
    this.points.forEach(function (p) {
      p.el.addEventListener("click", function () {
        if (self.dragged) return;
        self.open(+p.el.parentNode.getAttribute("data-m"), p.el.getAttribute("data-s"), p);
      });
    });
    [].forEach.call(svg.querySelectorAll("g.legend[data-m]"), function (g) {
      g.setAttribute("role", "button");
      g.setAttribute("tabindex", "0");
      var k = g.getAttribute("data-m");
      g.addEventListener("click", function () { toggle(k); });
      g.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") toggle(k); });
    });
  }
  Plot.prototype.px = function (x) { var v = this.view; return this.L + (x - v.x0) / (v.x1 - v.x0) * this.W; };
  Plot.prototype.py = function (y) { var v = this.view; return this.T + (v.y1 - y) / (v.y1 - v.y0) * this.H; };
  Plot.prototype.at = function (ev) {  /* the pointer in the SVG's own units (it is scaled to the page width) */
    var p = this.svg.createSVGPoint();
    p.x = ev.clientX; p.y = ev.clientY;
    return p.matrixTransform(this.svg.getScreenCTM().inverse());
  };
  Plot.prototype.inside = function (q) {
    return q.x >= this.L && q.x <= this.L + this.W && q.y >= this.T && q.y <= this.T + this.H;
  };
  Plot.prototype.wheel = function (ev) {
    var q = this.at(ev);
    if (!this.inside(q)) return;
    ev.preventDefault();
    var s = Math.exp(Math.max(-0.5, Math.min(0.5, ev.deltaY * 0.0015))), v = this.view;
    var cx = v.x0 + (q.x - this.L) / this.W * (v.x1 - v.x0), cy = v.y1 - (q.y - this.T) / this.H * (v.y1 - v.y0);
    this.view = {x0: cx - (cx - v.x0) * s, x1: cx + (v.x1 - cx) * s,
                 y0: ev.shiftKey ? v.y0 : cy - (cy - v.y0) * s, y1: ev.shiftKey ? v.y1 : cy + (v.y1 - cy) * s};
    this.redraw();
  };
  Plot.prototype.down = function (ev) {
    var q = this.at(ev);
    if (ev.button !== 0 || !this.inside(q)) return;
    this.dragging = {q: q, view: Object.assign({}, this.view)};
    this.dragged = false;
  };
  Plot.prototype.move = function (ev) {
    var d = this.dragging;
    if (!d) return;
    var q = this.at(ev), dx = q.x - d.q.x, dy = q.y - d.q.y;
    if (!this.dragged && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!this.dragged) this.svg.setPointerCapture(ev.pointerId);
    this.dragged = true;
    var v = d.view, sx = (v.x1 - v.x0) / this.W * dx, sy = (v.y1 - v.y0) / this.H * dy;
    this.view = {x0: v.x0 - sx, x1: v.x1 - sx, y0: v.y0 + sy, y1: v.y1 + sy};
    this.redraw();
  };
  Plot.prototype.up = function () {
    this.dragging = null;
    var self = this;
    setTimeout(function () { self.dragged = false; }, 0);  /* the click after a drag opens nothing */
  };
  Plot.prototype.reset = function () { this.view = Object.assign({}, this.home); this.redraw(); };
  Plot.prototype.redraw = function () {
    var self = this;
    this.points.forEach(function (p) {
      p.el.setAttribute("transform", "translate(" + (self.px(p.x) - p.px).toFixed(2) + "," +
                        (self.py(p.y) - p.py).toFixed(2) + ")");
    });
    this.lines.forEach(function (l) {
      l.el.setAttribute("points", l.xy.map(function (c) {
        return self.px(c[0]).toFixed(1) + "," + self.py(c[1]).toFixed(1);
      }).join(" "));
    });
    this.bars.forEach(function (b) {
      var x = self.px(+b.getAttribute("data-x")).toFixed(1);
      b.setAttribute("x1", x); b.setAttribute("x2", x);
      b.setAttribute("y1", self.py(+b.getAttribute("data-lo")).toFixed(1));
      b.setAttribute("y2", self.py(+b.getAttribute("data-hi")).toFixed(1));
    });
    if (this.selected) {
      this.ring.setAttribute("cx", this.px(this.selected.x));
      this.ring.setAttribute("cy", this.py(this.selected.y));
    }
    this.axes();
  };
  Plot.prototype.axes = function () {
    var v = this.view, L = this.L, T = this.T, W = this.W, H = this.H, self = this;
    var ya = this.svg.querySelector("g.yaxis"), xa = this.svg.querySelector("g.xaxis");
    ya.textContent = ""; xa.textContent = "";
    niceTicks(v.y0, v.y1, 5).forEach(function (t) {
      var y = self.py(t);
      svgEl("line", {x1: L, x2: L + W, y1: y, y2: y, stroke: "#e4e4e4"}, ya);
      svgEl("text", {x: L - 5, y: y + 4, "text-anchor": "end"}, ya).textContent = +t.toPrecision(6);
    });
    niceTicks(v.x0, v.x1, 5).forEach(function (t) {
      var x = self.px(t);
      svgEl("line", {x1: x, x2: x, y1: T, y2: T + H, stroke: "#f0f0f0"}, xa);
      svgEl("text", {x: x, y: T + H + 15, "text-anchor": "middle"}, xa).textContent = +t.toPrecision(6);
    });
  };

  /* a legend entry hides or shows its model in every plot of the page */
  function toggle(k) {
    hidden[k] = !hidden[k];
    plots.forEach(function (p) {
      [].forEach.call(p.svg.querySelectorAll('[data-m="' + k + '"]'), function (e) {
        if (e.classList.contains("legend")) {
          e.classList.toggle("off", hidden[k]);
          e.setAttribute("aria-pressed", hidden[k] ? "false" : "true");
        } else {
          e.style.display = hidden[k] ? "none" : "";
        }
      });
      if (p.selected && p.selected.el.parentNode.getAttribute("data-m") === k && hidden[k]) {
        p.ring.setAttribute("display", "none");
      }
    });
  }

  /* a site's detail, below its plot */
  Plot.prototype.open = function (k, index, point) {
    var model = DATA.models[k], site = model && model.sites[index];
    this.selected = point;
    this.ring.setAttribute("display", "");
    this.redraw();
    if (!this.panel) {
      this.panel = htmlEl("div", null, null, "detail");
      this.svg.parentNode.insertBefore(this.panel, this.svg.nextSibling);
    }
    var panel = this.panel, self = this;
    panel.textContent = "";
    var close = htmlEl("button", "close", panel);
    close.type = "button";
    close.style.float = "right";
    close.addEventListener("click", function () {
      panel.parentNode.removeChild(panel); self.panel = null; self.selected = null;
      self.ring.setAttribute("display", "none");
    });
    if (!site) { htmlEl("p", "no data recorded for this site", panel); return; }
    htmlEl("h4", model.name + " \u2014 site #" + index + " " + site.id + " (" + site.kind + ")", panel);
    var facts = ["op types: " + (site.op_types.join(" + ") || "\u2013"), "nodes: " + site.nodes,
                 "D = " + fmt(site.dim) + (site.dim_y != null && site.dim_y !== site.dim ? " \u2192 " + site.dim_y : ""),
                 rowsText(site),
                 "X: " + site.input + (site.input_shape ? " [" + shape(site.input_shape) + "]" : ""),
                 "Y: " + site.output];
    htmlEl("p", facts.join(" \u00b7 "), panel, "facts");
    var params = Object.keys(site.params || {});
    if (params.length) {
      htmlEl("p", "parameters: " + params.map(function (p) {
        return p + " = " + JSON.stringify(site.params[p]);
      }).join(", "), panel, "params");
    }
    scoresTable(site, this.metric, panel);
    htmlEl("h4", "neighbourhood in the graph", panel);
    drawNeighbourhood(site.neighbourhood, panel);
  };

  /* the rows the chunk scores saw, and the rows collected where more (those short of a whole chunk) */
  function rowsText(site) {
    var scored = site.scored_rows;
    if (scored == null || scored === site.rows) return "rows: " + fmt(site.rows);
    return "rows: " + fmt(scored) + " scored in " + fmt(site.chunks) + (site.chunks === 1 ? " chunk" : " chunks") +
      " (" + fmt(site.rows) + " collected)";
  }

  function scoresTable(site, first, panel) {
    var names = Object.keys(site.metrics).sort(function (a, b) { return (b === first) - (a === first); });
    var table = htmlEl("table", null, panel, "scores");
    var head = htmlEl("tr", null, table);
    ["metric", "mean", "95 % interval", "flags", "chunks", "per-chunk scores"].forEach(function (h) {
      htmlEl("th", h, head, "l");
    });
    names.forEach(function (m) {
      var e = site.metrics[m], tr = htmlEl("tr", null, table);
      tr.setAttribute("data-metric", m);
      htmlEl("td", m, tr, "l");
      htmlEl("td", e.status === "ok" ? fmt(e.mean) : e.status + (e.reason ? ": " + e.reason : ""), tr);
      htmlEl("td", e.ci95 ? "[" + fmt(e.ci95[0]) + ", " + fmt(e.ci95[1]) + "]" : "\u2013", tr);
      htmlEl("td", (e.flags || []).join(", ") || "-", tr, "l");
      htmlEl("td", e.pooled_rows ? "pooled (" + e.pooled_rows + " rows)" : fmt(e.chunks), tr);
      var cell = htmlEl("td", null, tr, "l");
      var values = e.values || [];
      if (values.length > 1) chunkChart(values, e.mean, e.ci95, cell);
      var shown = values.slice(0, 40).map(fmt).join(", ") + (values.length > 40 ? ", \u2026" : "");
      htmlEl("div", shown || "\u2013", cell, "chunks");
    });
  }

  function chunkChart(values, mean, ci, parent) {
    var w = 240, h = 44, lo = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    if (ci) { lo = Math.min(lo, ci[0]); hi = Math.max(hi, ci[1]); }
    if (!(hi > lo)) { lo -= 0.5; hi += 0.5; }
    var s = svgEl("svg", {width: w, height: h, viewBox: "0 0 " + w + " " + h, "class": "chunkplot"}, parent);
    function y(v) { return 4 + (hi - v) / (hi - lo) * (h - 8); }
    function x(i) { return 6 + i * (w - 12) / Math.max(1, values.length - 1); }
    if (ci) svgEl("rect", {x: 0, width: w, y: y(ci[1]), height: Math.max(1, y(ci[0]) - y(ci[1])), fill: "#e8eef8"}, s);
    if (mean != null) svgEl("line", {x1: 0, x2: w, y1: y(mean), y2: y(mean), stroke: "#4c72b0"}, s);
    values.forEach(function (v, i) {
      svgEl("title", {}, svgEl("circle", {cx: x(i), cy: y(v), r: 2.4, fill: "#222"}, s)).textContent =
        "chunk " + (i + 1) + ": " + fmt(v);
    });
  }

  /* the nodes before and after the site, in columns along the data flow */
  function drawNeighbourhood(nb, panel) {
    if (nb === "absent" || nb == null) {
      htmlEl("p", nb === "absent" ? "not recorded (the signature was written before onnxaff recorded it)"
             : "not recorded (no node to start from)", panel, "note");
      return;
    }
    var nodes = nb.nodes, col = nodes.map(function () { return 0; });
    nb.edges.forEach(function (e) { col[e[1]] = Math.max(col[e[1]], col[e[0]] + 1); });  /* edges go forward */
    var rows = {}, row = nodes.map(function (n, i) { rows[col[i]] = (rows[col[i]] || 0) + 1; return rows[col[i]] - 1; });
    var bw = 124, bh = 34, gx = 36, gy = 12, cols = Math.max.apply(null, col) + 1;
    var most = Math.max.apply(null, Object.keys(rows).map(function (c) { return rows[c]; }));
    var top = nb.edges.some(function (e) { return col[e[1]] - col[e[0]] > 1; }) ? 30 : 4;  /* room for arcs */
    var w = cols * (bw + gx) - gx + 8, h = most * (bh + gy) - gy + 4 + top;
    var s = svgEl("svg", {width: w, height: h, viewBox: "0 0 " + w + " " + h, "class": "nb",
                          "font-family": "sans-serif", "font-size": 11}, panel);
    function X(i) { return 4 + col[i] * (bw + gx); }
    function Y(i) { return top + (row[i] + (most - rows[col[i]]) / 2) * (bh + gy); }
    nb.edges.forEach(function (e) {
      var x1 = X(e[0]) + bw, y1 = Y(e[0]) + bh / 2, x2 = X(e[1]), y2 = Y(e[1]) + bh / 2, m = (x1 + x2) / 2, d;
      if (col[e[1]] - col[e[0]] > 1) {  /* over the columns between, not through their boxes */
        x1 = X(e[0]) + bw / 2; y1 = Y(e[0]); x2 = X(e[1]) + bw / 2; y2 = Y(e[1]);
        var lift = Math.min(y1, y2) - top + 24;
        d = "M" + x1 + "," + y1 + "C" + x1 + "," + (y1 - lift) + " " + x2 + "," + (y2 - lift) + " " + x2 + "," + y2;
        svgEl("path", {d: "M" + x2 + "," + y2 + "l-3.5,-6h7z", fill: "#888"}, s);
      } else {
        d = "M" + x1 + "," + y1 + "C" + m + "," + y1 + " " + m + "," + y2 + " " + x2 + "," + y2;
        svgEl("path", {d: "M" + x2 + "," + y2 + "l-6,-3.5v7z", fill: "#888"}, s);
      }
      svgEl("path", {d: d, fill: "none", stroke: "#888", "stroke-width": 1.2, "class": "edge"}, s);
    });
    var fills = {"-2": "#eef3fb", "-1": "#dde8f8", "0": "#ffe39a", "1": "#e0f3e0", "2": "#eef8ee"};
    nodes.forEach(function (n, i) {
      var g = svgEl("g", {"class": "node" + (n.at === 0 ? " own" : ""), "data-at": n.at}, s);
      svgEl("title", {}, g).textContent = n.name + " (" + n.op + ")";
      svgEl("rect", {x: X(i), y: Y(i), width: bw, height: bh, rx: 4, fill: fills[n.at] || "#f4f4f4",
                     stroke: n.at === 0 ? "#b07d00" : "#999"}, g);
      svgEl("text", {x: X(i) + bw / 2, y: Y(i) + 14, "text-anchor": "middle", "font-weight": "bold",
                     "class": "op"}, g).textContent = n.op.length > 20 ? n.op.slice(0, 19) + "\u2026" : n.op;
      svgEl("text", {x: X(i) + bw / 2, y: Y(i) + 27, "text-anchor": "middle", fill: "#555", "class": "name"}, g)
        .textContent = n.name.length > 22 ? "\u2026" + n.name.slice(-21) : n.name;
    });
    htmlEl("p", "blue: the nodes before the site (two levels of producers) \u00b7 yellow: the site's own nodes \u00b7 " +
           "green: after it (two levels of consumers); weights and constants left out" +
           (nb.omitted ? " \u00b7 " + nb.omitted + " more node(s) not drawn" : ""), panel, "note");
  }

  [].forEach.call(document.querySelectorAll("svg.sig[data-frame]"), function (svg, n) { plots.push(new Plot(svg, n)); });
})();
