/* trainmon report: draws the charts described in #trainmon-data with uPlot (embedded above).
 *
 * Chart kinds: "lines" (one or more series, joined on x), "stacked" (step-time breakdown under
 * the step time), "band" (min–max over ranks with the mean). Drag on a chart to zoom (every
 * chart with the same x unit follows), double-click or "reset zoom" to see everything again;
 * the legend under each chart shows the values under the cursor. Alerts are dashed vertical
 * lines (red: firing, green: resolved), NaN/Inf values red ticks at the bottom.
 *
 * When done, <body> gets data-ready="1", data-charts=<n drawn>; every figure gets data-ink=<the
 * number of painted pixels>; errors are counted in body[data-errors] by the handler at the top.
 */
(function () {
  "use strict";
  var body = document.body;
  var payload = JSON.parse(document.getElementById("trainmon-data").textContent);
  var alerts = payload.alerts || [];
  var plots = [];
  var syncing = false;
  var ready = false;
  var HEIGHT = 270;

  function fmt(v) {
    if (v === null || v === undefined) return "–";
    if (!isFinite(v)) return String(v);
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e9)) return v.toExponential(2);
    if (a >= 1e4) return Math.round(v).toLocaleString("en-US");
    return String(+v.toPrecision(4));
  }

  function axisValues(u, values) {
    return values.map(fmt);
  }

  function withAlpha(color, alpha) {
    var hex = Math.round(alpha * 255).toString(16);
    return color + (hex.length < 2 ? "0" + hex : hex);
  }

  function alertsOf(spec) {
    if (spec.xUnit !== "step") return [];
    return alerts.filter(function (a) { return spec.runs.indexOf(a.run) >= 0; });
  }

  function marksPlugin(spec, hoverBox) {
    var own = alertsOf(spec);
    var bad = [];
    (spec.series || []).forEach(function (s) {
      s.nonfinite.forEach(function (x) { bad.push(x); });
    });
    return {
      hooks: {
        draw: [function (u) {
          var ctx = u.ctx;
          var box = u.bbox;
          var dpr = window.devicePixelRatio || 1;
          ctx.save();
          ctx.lineWidth = Math.max(1, dpr);
          own.forEach(function (a) {
            var x = u.valToPos(a.x, "x", true);
            if (x < box.left || x > box.left + box.width) return;
            ctx.strokeStyle = a.state === "resolved" ? "rgba(44,160,44,0.85)" : "rgba(214,39,40,0.9)";
            ctx.setLineDash([4 * dpr, 3 * dpr]);
            ctx.beginPath();
            ctx.moveTo(x, box.top);
            ctx.lineTo(x, box.top + box.height);
            ctx.stroke();
          });
          ctx.setLineDash([]);
          ctx.fillStyle = "rgba(214,39,40,0.95)";
          bad.forEach(function (step) {
            var x = u.valToPos(step, "x", true);
            if (x < box.left || x > box.left + box.width) return;
            var y = box.top + box.height;
            ctx.beginPath();
            ctx.moveTo(x, y - 7 * dpr);
            ctx.lineTo(x - 4 * dpr, y);
            ctx.lineTo(x + 4 * dpr, y);
            ctx.closePath();
            ctx.fill();
          });
          ctx.restore();
        }],
        setCursor: [function (u) {
          if (!hoverBox) return;
          var left = u.cursor.left;
          var text = "";
          if (left !== null && left !== undefined && left >= 0) {
            own.forEach(function (a) {
              if (Math.abs(u.valToPos(a.x, "x") - left) <= 4) {
                text += (text ? " · " : "") + "step " + a.x + " " + a.state + " " + a.rule + ": " + a.message;
              }
            });
          }
          hoverBox.textContent = text;
        }],
      },
    };
  }

  function onScale(u, key) {
    if (key !== "x" || syncing || !ready) return;
    syncing = true;
    try {
      var me = plots.find(function (p) { return p.u === u; });
      var full = me && u.scales.x.min <= me.range[0] && u.scales.x.max >= me.range[1];
      plots.forEach(function (p) {
        if (p.u === u || !me || p.xUnit !== me.xUnit) return;
        if (full) p.u.setScale("x", { min: p.range[0], max: p.range[1] });
        else p.u.setScale("x", { min: u.scales.x.min, max: u.scales.x.max });
      });
    } finally {
      syncing = false;
    }
  }

  function baseOptions(spec, el, series, logY) {
    return {
      width: Math.max(320, el.clientWidth || 640),
      height: HEIGHT,
      series: [{ label: spec.xUnit, value: function (u, v) { return v === null ? "–" : fmt(v); } }].concat(series),
      scales: { x: { time: false }, y: logY ? { distr: 3 } : {} },
      axes: [
        { label: spec.xUnit, values: axisValues },
        { label: spec.yLabel, size: 64, values: axisValues },
      ],
      cursor: { sync: { key: "x:" + spec.xUnit, setSeries: false }, drag: { x: true, y: false } },
      legend: { live: true },
      hooks: { setScale: [onScale] },
      plugins: [marksPlugin(spec, el.parentNode.querySelector(".alert-hover"))],
    };
  }

  function linesChart(spec, el, logY) {
    var tables = spec.series.map(function (s) { return [s.x, s.y]; });
    var data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    if (logY) {  // a log axis cannot show 0 or negatives: leave them out
      data = data.map(function (col, i) {
        return i === 0 ? col : col.map(function (v) { return v !== null && v !== undefined && v <= 0 ? null : v; });
      });
    }
    var series = spec.series.map(function (s) {
      return {
        label: s.label,
        stroke: s.color,
        width: 1.5,
        dash: s.dash && s.dash.length ? s.dash : undefined,
        value: function (u, v) { return fmt(v); },
      };
    });
    return new uPlot(baseOptions(spec, el, series, logY), data, el);
  }

  function stackedChart(spec, el) {
    var st = spec.stack;
    var n = st.x.length;
    var data = [st.x];
    var raw = [null];
    var series = [];
    var bands = [];
    var sum = new Array(n).fill(0);
    var total = st.total ? st.total.values : null;
    function share(v, idx) {
      if (!total || total[idx] === null || !total[idx]) return "";
      return " (" + (100 * v / total[idx]).toFixed(1) + "%)";
    }
    st.parts.forEach(function (p, i) {
      sum = sum.map(function (c, j) { var v = p.values[j]; return c + (v === null ? 0 : v); });
      data.push(sum.slice());
      raw.push(p.values);
      series.push({
        label: p.label,
        stroke: p.color,
        fill: i === 0 ? withAlpha(p.color, 0.75) : undefined,
        width: 1,
        value: function (u, v, si, idx) {
          if (idx === null || idx === undefined) return "–";
          var r = raw[si][idx];
          return r === null ? "–" : fmt(r) + " ms" + share(r, idx);
        },
      });
      if (i > 0) bands.push({ series: [i + 1, i], fill: withAlpha(p.color, 0.75) });
    });
    [st.total, st.totalMax].forEach(function (line, k) {
      if (!line) return;
      data.push(line.values);
      raw.push(line.values);
      series.push({
        label: line.label,
        stroke: k === 0 ? "#222222" : "#888888",
        width: k === 0 ? 1.5 : 1,
        dash: k === 0 ? undefined : [4, 3],
        value: function (u, v) { return v === null ? "–" : fmt(v) + " ms"; },
      });
    });
    var opts = baseOptions(spec, el, series, false);
    opts.bands = bands;
    opts.scales.y = { range: function (u, min, max) { return [0, max > 0 ? max * 1.05 : 1]; } };
    return new uPlot(opts, data, el);
  }

  function bandChart(spec, el) {
    var tables = [];
    var series = [];
    var bands = [];
    var index = 1;
    spec.bands.forEach(function (b) {
      var table = [b.x, b.min, b.max];
      series.push({ label: b.label + " min", stroke: withAlpha(b.color, 0.6), width: 1, value: function (u, v) { return fmt(v); } });
      series.push({ label: b.label + " max", stroke: withAlpha(b.color, 0.6), width: 1, value: function (u, v) { return fmt(v); } });
      bands.push({ series: [index + 1, index], fill: withAlpha(b.color, 0.18) });
      index += 2;
      if (b.mean) {
        table.push(b.mean);
        series.push({ label: b.label + " mean", stroke: b.color, width: 1.5, value: function (u, v) { return fmt(v); } });
        index += 1;
      }
      tables.push(table);
    });
    var data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    var opts = baseOptions(spec, el, series, false);
    opts.bands = bands;
    return new uPlot(opts, data, el);
  }

  function build(spec, el, logY) {
    if (spec.kind === "stacked") return stackedChart(spec, el);
    if (spec.kind === "band") return bandChart(spec, el);
    return linesChart(spec, el, logY);
  }

  function dataRange(u) {
    var xs = u.data[0];
    if (!xs.length) return [0, 1];
    var lo = xs[0], hi = xs[xs.length - 1];
    return lo < hi ? [lo, hi] : [lo - 1, hi + 1];  // never an empty range
  }

  payload.charts.forEach(function (spec) {
    var figure = document.getElementById(spec.id);
    if (!figure) return;
    var el = figure.querySelector(".plot");
    try {
      var entry = { spec: spec, xUnit: spec.xUnit, u: build(spec, el, false), figure: figure };
      entry.range = dataRange(entry.u);  // replaced by uPlot's committed range once drawn
      plots.push(entry);
      figure.setAttribute("data-rendered", "1");
      var toggle = figure.querySelector("input.logy");
      if (toggle) {
        toggle.addEventListener("change", function () {
          var x = entry.u.scales.x;
          entry.u.destroy();
          syncing = true;  // the new chart's first scale is its own, not a user's zoom
          try {
            entry.u = build(spec, el, toggle.checked);
            entry.u.setScale("x", { min: x.min, max: x.max });
          } finally {
            syncing = false;
          }
        });
      }
    } catch (err) {
      figure.setAttribute("data-rendered", "0");
      el.textContent = "this chart could not be drawn: " + err;
      throw err;
    }
  });

  var reset = document.getElementById("reset-zoom");
  if (reset) {
    reset.addEventListener("click", function () {
      syncing = true;
      plots.forEach(function (p) { p.u.setScale("x", { min: p.range[0], max: p.range[1] }); });
      syncing = false;
    });
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      plots.forEach(function (p) {
        var el = p.figure.querySelector(".plot");
        p.u.setSize({ width: Math.max(320, el.clientWidth || 640), height: HEIGHT });
      });
    }, 100);
  });

  setTimeout(function () {
    var drawn = 0;
    plots.forEach(function (p) {
      p.range = [p.u.scales.x.min, p.u.scales.x.max];  // uPlot's own full range, padding included
      var canvas = p.u.ctx.canvas;
      var ink = 0;
      try {
        var pixels = p.u.ctx.getImageData(0, 0, canvas.width, canvas.height).data;
        for (var i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) ink++;
      } catch (err) {
        ink = -1;
      }
      p.figure.setAttribute("data-ink", String(ink));
      if (ink > 0) drawn++;
    });
    body.setAttribute("data-charts", String(drawn));
    ready = true;
    if (location.hash === "#trainmon-selftest") selfTest(function () { body.setAttribute("data-ready", "1"); });
    else body.setAttribute("data-ready", "1");
  }, 0);

  // Does what a user does (zoom a chart, hover, reset zoom, toggle log scale), one step per
  // tick as uPlot commits changes asynchronously, so a headless browser test catches errors in
  // the interaction code: open report.html#trainmon-selftest.
  function selfTest(done) {
    var result = [];
    var units = {};
    plots.forEach(function (p) {
      if (units[p.xUnit]) return;
      units[p.xUnit] = true;
      var span = p.range[1] - p.range[0];
      p.u.setScale("x", { min: p.range[0] + span / 4, max: p.range[0] + span / 2 });
    });
    setTimeout(function () {
      plots.forEach(function (p) {
        p.u.setCursor({ left: p.u.bbox.width / 3 / (window.devicePixelRatio || 1), top: 20 });
      });
      result.push("zoomed " + plots.filter(function (p) { return p.u.scales.x.max < p.range[1]; }).length);
      if (reset) reset.click();
      setTimeout(function () {
        result.push("reset " + plots.filter(function (p) {
          return p.u.scales.x.min === p.range[0] && p.u.scales.x.max === p.range[1];
        }).length);
        plots.slice().forEach(function (p) {
          var toggle = p.figure.querySelector("input.logy");
          if (!toggle) return;
          toggle.checked = true;
          toggle.dispatchEvent(new Event("change"));
          toggle.checked = false;
          toggle.dispatchEvent(new Event("change"));
        });
        setTimeout(function () {
          body.setAttribute("data-selftest", result.join(" ") + " of " + plots.length);
          done();
        }, 0);
      }, 0);
    }, 0);
  }
})();
