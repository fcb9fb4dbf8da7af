/* trainmon report: draws the charts described in #trainmon-data with uPlot (embedded above).
 *
 * Chart kinds: "lines" (one or more series, joined on x), "stacked" (step-time breakdown under
 * the step time), "band" (min–max over ranks filled, the mean drawn on top; hovering names the
 * slowest rank at that step, from perf/slowest_rank, and the rank holding the max, from
 * <metric>/argmax_rank). Drag on a chart to zoom (every chart with the same x unit follows),
 * double-click or "reset zoom" to see everything again; the legend under each chart shows the
 * values under the cursor.
 *
 * Alerts (payload.alerts): an alert whose metric a chart draws (its "charts") is drawn on that
 * chart only, as a dashed vertical line with a diamond at the alert's value (at the top when
 * the value is off the chart or missing); an alert whose metric no chart draws is a dashed
 * vertical line on every step chart of its run. Red: firing, green: resolved; named on hover.
 * NaN/Inf values: red triangles on the x axis of every chart kind (the line has a gap there;
 * the axes stay finite), named on hover.
 *
 * Smoothing: one slider (nav bar, 0 to 0.999) smooths every "lines" series with TensorBoard's
 * debiased exponential moving average (see smooth()); the raw series stays drawn faintly behind
 * the smoothed one, the legend shows the smoothed value and the raw one. The stacked breakdown
 * and the bands (min, max and mean) are not smoothed. The choice lives in the URL fragment
 * (#smoothing=0.9, kept next to an anchor: #train&smoothing=0.9; ?smoothing=0.9 is read too),
 * rewritten with history.replaceState as the slider moves, so a shared link shows the same view.
 *
 * Restarts: on every step-axis chart of a run read from a trainmon journal with two attempts
 * or more, a purple dash-dot vertical line where each later attempt began (its resume step,
 * else its first logged step; payload.runs[i].restarts), named on hover ("attempt 2: resumed
 * from step 20", "attempt 2: restarted from scratch").
 *
 * x axis: a select (nav bar, shown when some run logs a samples-seen counter per step,
 * payload.runs[i].samples, or has a clock, payload.runs[i].wall) offers "step", "samples" and
 * "wall time". Samples: the step-axis line charts over samples seen (the counter interpolated
 * between its points; a chart with a run that has no counter stays on steps). Wall time: every
 * chart (lines, breakdown, bands) over seconds since each run's start (the run's clock, one
 * time per step, interpolated between its points; runs overlaid all start at 0; a chart with
 * a run that has no clock, a CSV folder, stays as it is), ticks as durations. Alert, restart
 * and NaN marks move with the points. Kept in the fragment as #x=samples or #x=wall, next to
 * the smoothing (#smoothing=0.6&x=wall).
 *
 * Axes: a chart with a single x (one point) gets an x range around it, a y range with no
 * spread (one point, a constant) a range padded around its value, not uPlot's 0..2v.
 *
 * When done, <body> gets data-ready="1", data-ready-ms (milliseconds from navigation to
 * charts drawn), data-charts=<n drawn>; every figure gets data-ink=<the number of painted
 * pixels>, data-x-min/-max and data-y-min/-max (its scales as drawn), data-x-unit (the x it
 * is drawn on: step, samples or wall), data-nonfinite (its NaN/Inf points) and
 * data-nonfinite-drawn, data-alerts-watched (alerts of its metrics), data-alert-markers and
 * data-alert-lines (drawn by its last draw), data-hover (the last non-empty hover text); a
 * lines figure data-smoothing, data-smoothed-first/-last (its first series' first and last
 * finite smoothed value as drawn), data-smoothed-sum and data-raw-sum (over all its series); a
 * figure on the step axis data-restarts (the steps its runs' later attempts began at,
 * comma-separated; "" for none) and data-restarts-drawn (how many restart lines its last draw
 * painted inside the plot); errors are counted in body[data-errors] by the handler at the top.
 *
 * Served live (trainmon report --serve), assets/live.js changes the charts' specs as the run
 * is written and draws them again through window.__trainmonReport.redraw, keeping a zoom.
 */
(function () {
  "use strict";
  var body = document.body;
  var payload = JSON.parse(document.getElementById("trainmon-data").textContent);
  var alerts = payload.alerts || [];
  var runInfo = payload.runs || [];
  var plots = [];
  var syncing = false;
  var ready = false;
  var HEIGHT = 270;
  var SMOOTHING_MAX = 0.999;
  var RAW_ALPHA = 0.25;  // the raw series behind a smoothed one
  var SELFTEST = "trainmon-selftest";

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

  // -- smoothing --------------------------------------------------------------------------

  // TensorBoard's scalar-dashboard smoothing (vz_line_chart2, resmoothDataset), point by point
  // whatever the x axis (step, samples or wall time): last = last*w + (1-w)*v over the finite
  // points, divided by 1 - w^n (n: finite points so far) to undo the pull towards the initial 0;
  // a non-finite point (null here: NaN/Inf) is not folded in and stays as it is, and a constant
  // series is left as it is (TensorBoard #786). w = 0 gives the raw values exactly. A
  // down-sampled series is smoothed over its drawn points (TensorBoard: its sampled ones).
  function smooth(values, weight) {
    var n = values.length;
    var out = new Array(n);
    var first = n ? values[0] : null;
    var constant = true;
    for (var k = 1; k < n && constant; k++) constant = values[k] === first;
    var last = 0;
    var count = 0;
    for (var i = 0; i < n; i++) {
      var v = values[i];
      if (constant || v === null || v === undefined || !isFinite(v)) {
        out[i] = v === undefined ? null : v;
        continue;
      }
      last = last * weight + (1 - weight) * v;
      count++;
      out[i] = weight !== 1 ? last / (1 - Math.pow(weight, count)) : last;
    }
    return out;
  }

  function parseSmoothing(text) {
    var w = parseFloat(text);
    if (!isFinite(w) || w <= 0) return 0;
    return Math.min(w, SMOOTHING_MAX);
  }

  // The fragment as ordered [key, value] pairs ("train&smoothing=0.9": [["train", ""], ...]).
  function hashPairs() {
    var out = [];
    new URLSearchParams(location.hash.replace(/^#/, "")).forEach(function (v, k) { out.push([k, v]); });
    return out;
  }

  function hashGet(key) {
    var found = hashPairs().filter(function (p) { return p[0] === key; });
    return found.length ? found[found.length - 1][1] : null;
  }

  function urlSmoothing() {
    var text = hashGet("smoothing");
    if (text === null) text = new URLSearchParams(location.search).get("smoothing");
    return text === null ? null : parseSmoothing(text);
  }

  // Rewrites the fragment's smoothing (none at 0) and x axis (none for steps), keeping what
  // else it holds (an anchor).
  function writeStateToUrl() {
    var pairs = hashPairs().filter(function (p) { return p[0] !== "smoothing" && p[0] !== "x"; });
    if (slider && parseSmoothing(slider.value) > 0) pairs.push(["smoothing", slider.value]);
    if (xMode !== "step") pairs.push(["x", xMode]);
    var hash = pairs.map(function (p) {
      return encodeURIComponent(p[0]) + (p[1] ? "=" + encodeURIComponent(p[1]) : "");
    }).join("&");
    var url = location.href.split("#")[0] + (hash ? "#" + hash : "");
    if (url === location.href) return;
    try {
      history.replaceState(history.state, "", url);
    } catch (err) {  // a sandboxed frame may refuse it: the page works on without
    }
  }

  var smoothing = 0;
  var slider = null;
  var sliderText = null;

  function smoothingControl() {
    var any = payload.charts.some(function (c) { return c.kind === "lines"; });
    if (!any) return;
    var label = document.createElement("label");
    label.className = "smoothing";
    label.title = "TensorBoard's exponential moving average (debiased) on every line chart; " +
      "the raw values stay drawn faintly. Kept in the page's address.";
    label.appendChild(document.createTextNode("smoothing "));
    slider = document.createElement("input");
    slider.type = "range";
    slider.id = "smoothing";
    slider.min = "0";
    slider.max = String(SMOOTHING_MAX);
    slider.step = "0.001";
    sliderText = document.createElement("output");
    sliderText.htmlFor = "smoothing";
    label.appendChild(slider);
    label.appendChild(sliderText);
    var nav = document.querySelector("nav");
    if (nav) nav.appendChild(label);
    else body.insertBefore(label, body.firstChild);
    slider.addEventListener("input", function () {
      setSmoothing(slider.value);
      writeStateToUrl();
    });
  }

  // Shows smoothing ``text`` on the slider and, once the charts exist, redraws the lines.
  function setSmoothing(text) {
    var w = parseSmoothing(text);
    if (slider) {
      slider.value = String(w);
      w = parseSmoothing(slider.value);  // what the slider holds (its step), drawn as shown
      slider.setAttribute("value", slider.value);
      sliderText.textContent = slider.value;
    }
    if (w === smoothing) return;
    smoothing = w;
    plots.forEach(function (p) {
      if (p.spec.kind !== "lines") return;
      p.u.setData(linesData(p.spec, p.logY), false);
      p.u.redraw();  // keeps the x range (a zoom), fits y to the new lines
      exposeSmoothing(p.figure, p.u, p.spec);
    });
  }

  function exposeSmoothing(figure, u, spec) {
    var first = null;
    var last = null;
    var sum = 0;
    var rawSum = 0;
    spec.series.forEach(function (s, i) {
      var raw = u.data[1 + 2 * i];
      var smoothed = u.data[2 + 2 * i];
      for (var j = 0; j < smoothed.length; j++) {
        var v = smoothed[j];
        if (v !== null && v !== undefined && isFinite(v)) {
          if (i === 0) {
            if (first === null) first = v;
            last = v;
          }
          sum += v;
        }
        var r = raw[j];
        if (r !== null && r !== undefined && isFinite(r)) rawSum += r;
      }
    });
    figure.setAttribute("data-smoothing", String(smoothing));
    figure.setAttribute("data-smoothed-first", String(first));
    figure.setAttribute("data-smoothed-last", String(last));
    figure.setAttribute("data-smoothed-sum", String(sum));
    figure.setAttribute("data-raw-sum", String(rawSum));
  }

  // -- x axis: steps, samples or wall time -----------------------------------------------

  var X_MODES = { step: "step", samples: "samples", wall: "wall time" };
  var xMode = "step";
  var xSelect = null;

  // A run's map from its x (steps; samples for DeepSpeed's tags) to samples seen ("samples")
  // or to seconds since its start ("wall"): {x, y}, interpolated between points; null if none.
  function axisOf(run, mode) {
    var info = runInfo[run];
    var map = info && info[mode];
    return map && map.x && map.x.length ? map : null;
  }

  function hasSamples(run) {
    return !!axisOf(run, "samples");
  }

  // Whether the run has a clock, on ``unit`` (its x: "step" or "samples") when given.
  function hasWall(run, unit) {
    var map = axisOf(run, "wall");
    return !!map && (!unit || (map.unit || "step") === unit);
  }

  function samplesOffered() {
    return runInfo.some(function (r, i) { return hasSamples(i); });
  }

  function wallOffered() {
    return runInfo.some(function (r, i) { return hasWall(i); });
  }

  function parseXMode(text) {
    if (text === "samples" && samplesOffered()) return "samples";
    if (text === "wall" && wallOffered()) return "wall";
    return "step";
  }

  // The x a chart is drawn on: samples for a step-axis line chart whose runs all count
  // samples; wall time for any chart whose runs all have a clock on the chart's x; else its own.
  function unitOf(spec) {
    if (xMode === "samples") {
      if (spec.kind !== "lines" || spec.xUnit !== "step") return spec.xUnit;
      var all = spec.series.every(function (s) { return hasSamples(s.run); });
      return all ? "samples" : spec.xUnit;
    }
    if (xMode === "wall") {
      if (spec.xUnit !== "step" && spec.xUnit !== "samples") return spec.xUnit;
      var timed = spec.runs.length > 0 && spec.runs.every(function (r) { return hasWall(r, spec.xUnit); });
      return timed ? "wall" : spec.xUnit;
    }
    return spec.xUnit;
  }

  // Whether the chart's own x is drawn as something else (samples, wall time).
  function mapped(spec) {
    return unitOf(spec) !== spec.xUnit;
  }

  // ``map`` at ``x`` (linear between its points); null outside them.
  function interpolate(map, x) {
    var xs = map.x;
    var ys = map.y;
    var n = xs.length;
    if (x < xs[0] || x > xs[n - 1]) return null;
    var lo = 0;
    var hi = n - 1;
    while (hi - lo > 1) {
      var mid = (lo + hi) >> 1;
      if (xs[mid] <= x) lo = mid;
      else hi = mid;
    }
    if (xs[lo] === x || lo === hi) return ys[lo];
    if (xs[hi] === x) return ys[hi];
    return ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / (xs[hi] - xs[lo]);
  }

  // A position on a run's own x (a step) on the chart's x (null: not on it).
  function toX(spec, run, step) {
    var unit = unitOf(spec);
    if (unit === spec.xUnit) return step;
    return interpolate(runInfo[run][unit === "wall" ? "wall" : "samples"], step);
  }

  // Columns on a run's x, on the chart's x: points outside the map left out, of points on one
  // x the last kept; as they are when the chart's x is the run's own.
  function mapColumns(spec, run, xs, cols) {
    if (!mapped(spec)) return [xs].concat(cols);
    var outX = [];
    var out = cols.map(function () { return []; });
    for (var i = 0; i < xs.length; i++) {
      var x = toX(spec, run, xs[i]);
      if (x === null) continue;
      var n = outX.length;
      if (n && x <= outX[n - 1]) {
        if (x < outX[n - 1]) continue;
        for (var k = 0; k < cols.length; k++) out[k][n - 1] = cols[k][i];
        continue;
      }
      outX.push(x);
      for (var c = 0; c < cols.length; c++) out[c].push(cols[c][i]);
    }
    return [outX].concat(out);
  }

  function seriesXY(spec, s) {
    return mapColumns(spec, s.run, s.x, [s.y]);
  }

  // Seconds as a short duration: 45 s, 12 min 05 s, 3 h 20 min, 2 d 4 h.
  function fmtDuration(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var sign = v < 0 ? "-" : "";
    var a = Math.abs(v);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (a < 60) return sign + (+a.toPrecision(3)) + " s";
    var s = Math.round(a);
    if (s < 3600) return sign + Math.floor(s / 60) + " min" + (s % 60 ? " " + two(s % 60) + " s" : "");
    var m = Math.round(a / 60);
    if (m < 1440) return sign + Math.floor(m / 60) + " h" + (m % 60 ? " " + two(m % 60) + " min" : "");
    var h = Math.round(a / 3600);
    return sign + Math.floor(h / 24) + " d" + (h % 24 ? " " + (h % 24) + " h" : "");
  }

  // Tick spacings of a wall-time axis: fractions of a second up to weeks.
  var WALL_INCRS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
    60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];

  function xControl() {
    var offered = { step: true, samples: samplesOffered(), wall: wallOffered() };
    if (!offered.samples && !offered.wall) return;
    var label = document.createElement("label");
    label.className = "x-axis";
    label.title = "The x of the charts: steps, samples seen (a run's samples counter) or wall " +
      "time since each run's start. Kept in the page's address.";
    label.appendChild(document.createTextNode("x "));
    xSelect = document.createElement("select");
    xSelect.id = "x-axis";
    Object.keys(X_MODES).forEach(function (key) {
      if (!offered[key]) return;
      var option = document.createElement("option");
      option.value = key;
      option.textContent = X_MODES[key];
      xSelect.appendChild(option);
    });
    label.appendChild(xSelect);
    var nav = document.querySelector("nav");
    if (nav) nav.appendChild(label);
    else body.insertBefore(label, body.firstChild);
    xSelect.addEventListener("change", function () {
      setXMode(xSelect.value);
      writeStateToUrl();
    });
  }

  // Shows x mode ``text`` on the control and, once the charts exist, redraws the charts whose
  // x changes (their zoom reset: steps, samples and seconds do not share a range).
  function setXMode(text) {
    var mode = parseXMode(text);
    if (xSelect) {
      xSelect.value = mode;
      Array.prototype.forEach.call(xSelect.options, function (o) {
        if (o.value === mode) o.setAttribute("selected", "");
        else o.removeAttribute("selected");
      });
    }
    if (mode === xMode) return;
    var before = plots.map(function (p) { return unitOf(p.spec); });
    xMode = mode;
    syncing = true;  // the rebuilt charts' first scales are their own, not a user's zoom
    try {
      plots.forEach(function (p, i) {
        if (unitOf(p.spec) === before[i]) return;
        p.u.destroy();
        p.view = null;
        p.u = build(p.spec, p.figure.querySelector(".plot"), p.logY);
        p.xUnit = unitOf(p.spec);
        p.range = dataRange(p.u);
        exposeUnit(p.figure, p.spec);
      });
    } finally {
      syncing = false;
    }
    setTimeout(function () {
      plots.forEach(function (p) { p.range = [p.u.scales.x.min, p.u.scales.x.max]; });
    }, 0);
  }

  function exposeUnit(figure, spec) {
    figure.setAttribute("data-x-unit", unitOf(spec));
  }

  // -- axes -------------------------------------------------------------------------------

  // y from the data in view: uPlot's own padding, except with no spread (one point, a
  // constant: uPlot would show 0..2v) a range padded around the value; none at all: 0..1.
  function yRange(u, min, max) {
    if (min === null || max === null || !isFinite(min) || !isFinite(max)) return [0, 1];
    var size = Math.max(Math.abs(min), Math.abs(max));
    if (max - min > size * 1e-9) return uPlot.rangeNum(min, max, 0.1, true);
    var mid = (min + max) / 2;
    var pad = mid !== 0 ? Math.abs(mid) * 0.1 : 1;
    return [mid - pad, mid + pad];
  }

  function yRangeLog(u, min, max) {
    if (min === null || max === null || !(min > 0) || !isFinite(max)) return [1, 10];
    if (max - min > max * 1e-9) return uPlot.rangeLog(min, max, 10, false);
    return [min / 2, max * 2];
  }

  // One x (a single point, or one step shared by every series): a range around it, padded 5%
  // (at least 1) instead of uPlot's 0..2x; fixed, so a shared zoom still moves it.
  function xScale(xs) {
    var scale = { time: false };
    var lo = null;
    var hi = null;
    for (var i = 0; i < xs.length; i++) {
      var x = xs[i];
      if (x === null || x === undefined) continue;
      if (lo === null || x < lo) lo = x;
      if (hi === null || x > hi) hi = x;
    }
    if (lo !== null && lo === hi) {
      var pad = Math.max(1, Math.abs(lo) * 0.05);
      scale.auto = false;
      scale.min = lo - pad;
      scale.max = lo + pad;
    }
    return scale;
  }

  function exposeScales(u) {
    var figure = u.root.closest("figure");
    if (!figure) return;
    ["x", "y"].forEach(function (key) {
      var sc = u.scales[key];
      if (!sc) return;
      figure.setAttribute("data-" + key + "-min", String(sc.min));
      figure.setAttribute("data-" + key + "-max", String(sc.max));
    });
  }

  // The alerts drawn on a step chart: those whose metric it draws (``watched``: a marker at
  // the alert's value, on this chart only) and those whose metric no chart draws (a line on
  // every step chart of their run).
  function alertsOf(spec) {
    if (spec.xUnit !== "step") return [];
    return alerts.filter(function (a) {
      if (spec.runs.indexOf(a.run) < 0) return false;
      return a.charts && a.charts.length ? a.charts.indexOf(spec.id) >= 0 : true;
    }).map(function (a) {
      return { a: a, watched: !!(a.charts && a.charts.length) };
    });
  }

  // Where the later attempts of the chart's runs began (step-axis charts only).
  function restartsOf(spec) {
    if (spec.xUnit !== "step") return [];
    var out = [];
    spec.runs.forEach(function (run) {
      var info = runInfo[run];
      ((info && info.restarts) || []).forEach(function (m) {
        var who = runInfo.length > 1 ? info.name + ": " : "";
        out.push({ run: run, x: m.x, text: who + "attempt " + m.attempt + ": " + m.label });
      });
    });
    return out;
  }

  // The chart's NaN/Inf points: {run, x (its own x), metric}.
  function nonfiniteOf(spec) {
    if (spec.kind !== "lines") return spec.nonfinite || [];
    var out = [];
    spec.series.forEach(function (s) {
      (s.nonfinite || []).forEach(function (x) { out.push({ run: s.run, x: x, metric: s.metric }); });
    });
    return out;
  }

  // Per band with a slowest-rank series, its points on the chart's x (for the hover).
  function rankLookup(spec) {
    if (spec.kind !== "band") return [];
    return spec.bands.filter(function (b) { return b.slowest || b.argmax; }).map(function (b) {
      var xs = b.x.map(function (x) { return toX(spec, b.run, x); });
      return { band: b, xs: xs };
    });
  }

  // The index of the point of ``xs`` (ascending, nulls allowed) nearest ``at``; -1 for none.
  function nearest(xs, at) {
    var best = -1;
    var gap = Infinity;
    var lo = 0;
    var hi = xs.length - 1;
    while (hi - lo > 1) {  // skip to the neighbourhood, then look at the few around it
      var mid = (lo + hi) >> 1;
      if (xs[mid] !== null && xs[mid] <= at) lo = mid;
      else hi = mid;
    }
    for (var i = Math.max(0, lo - 2); i <= Math.min(xs.length - 1, hi + 2); i++) {
      if (xs[i] === null) continue;
      var d = Math.abs(xs[i] - at);
      if (d < gap) { gap = d; best = i; }
    }
    return best;
  }

  function ranksText(lookup, at, several) {
    var parts = [];
    lookup.forEach(function (entry) {
      var i = nearest(entry.xs, at);
      if (i < 0) return;
      var b = entry.band;
      var bits = [];
      if (b.slowest && b.slowest[i] !== null) bits.push("slowest rank " + b.slowest[i]);
      if (b.argmax && b.argmax[i] !== null) bits.push("max on " + (b.over || "rank") + " " + b.argmax[i]);
      if (bits.length) parts.push((several ? b.label + ": " : "") + "step " + b.x[i] + " " + bits.join(", "));
    });
    return parts.join(" · ");
  }

  function diamond(ctx, x, y, r) {
    ctx.beginPath();
    ctx.moveTo(x, y - r);
    ctx.lineTo(x + r, y);
    ctx.lineTo(x, y + r);
    ctx.lineTo(x - r, y);
    ctx.closePath();
    ctx.fill();
    ctx.stroke();
  }

  // Draws restarts (purple dash-dot lines), alerts (a watched one: dashed line and a diamond
  // at its value, or at the top when its value is off the chart; another: a dashed line),
  // and NaN/Inf points (red triangles on the x axis); names them on hover, with the slowest
  // rank on a band chart. Exposes on the figure how many of each its last draw painted.
  function marksPlugin(spec, hoverBox, figure) {
    var own = alertsOf(spec);
    var restarts = restartsOf(spec);
    var bad = nonfiniteOf(spec);
    var ranks = rankLookup(spec);
    if (figure && spec.xUnit === "step") {
      var steps = restarts.map(function (m) { return m.x; }).sort(function (a, b) { return a - b; });
      figure.setAttribute("data-restarts", steps.filter(function (x, i) { return steps.indexOf(x) === i; }).join(","));
    }
    if (figure) {
      figure.setAttribute("data-nonfinite", String(bad.length));
      figure.setAttribute("data-alerts-watched", String(own.filter(function (o) { return o.watched; }).length));
    }
    function inside(u, at) {
      if (at === null) return null;
      var x = u.valToPos(at, "x", true);
      var box = u.bbox;
      return isFinite(x) && x >= box.left && x <= box.left + box.width ? x : null;
    }
    return {
      hooks: {
        draw: [function (u) {
          var ctx = u.ctx;
          var box = u.bbox;
          var dpr = window.devicePixelRatio || 1;
          ctx.save();
          var drawn = 0;
          ctx.strokeStyle = "rgba(106,61,154,0.9)";
          ctx.lineWidth = Math.max(1.5, 1.5 * dpr);
          ctx.setLineDash([8 * dpr, 3 * dpr, 2 * dpr, 3 * dpr]);
          restarts.forEach(function (m) {
            var x = inside(u, toX(spec, m.run, m.x));
            if (x === null) return;
            ctx.beginPath();
            ctx.moveTo(x, box.top);
            ctx.lineTo(x, box.top + box.height);
            ctx.stroke();
            drawn++;
          });
          if (figure && spec.xUnit === "step") figure.setAttribute("data-restarts-drawn", String(drawn));
          ctx.lineWidth = Math.max(1, dpr);
          var markers = 0;
          var lines = 0;
          own.forEach(function (o) {
            var a = o.a;
            var x = inside(u, toX(spec, a.run, a.x));
            if (x === null) return;
            var color = a.state === "resolved" ? "rgba(44,160,44,0.9)" : "rgba(214,39,40,0.9)";
            ctx.strokeStyle = color;
            ctx.setLineDash([4 * dpr, 3 * dpr]);
            ctx.beginPath();
            ctx.moveTo(x, box.top);
            ctx.lineTo(x, box.top + box.height);
            ctx.stroke();
            if (!o.watched) {
              lines++;
              return;
            }
            var y = a.value !== null && a.value !== undefined ? u.valToPos(a.value, "y", true) : NaN;
            if (!isFinite(y) || y < box.top || y > box.top + box.height) y = box.top + 7 * dpr;
            ctx.setLineDash([]);
            ctx.fillStyle = color;
            ctx.strokeStyle = "#ffffff";
            diamond(ctx, x, y, 6 * dpr);
            markers++;
          });
          ctx.setLineDash([]);
          ctx.fillStyle = "rgba(214,39,40,0.95)";
          var nonfinite = 0;
          bad.forEach(function (b) {
            var x = inside(u, toX(spec, b.run, b.x));
            if (x === null) return;
            var y = box.top + box.height;
            ctx.beginPath();
            ctx.moveTo(x, y - 7 * dpr);
            ctx.lineTo(x - 4 * dpr, y);
            ctx.lineTo(x + 4 * dpr, y);
            ctx.closePath();
            ctx.fill();
            nonfinite++;
          });
          ctx.restore();
          if (figure) {
            figure.setAttribute("data-alert-markers", String(markers));
            figure.setAttribute("data-alert-lines", String(lines));
            figure.setAttribute("data-nonfinite-drawn", String(nonfinite));
          }
        }],
        setCursor: [function (u) {
          if (!hoverBox) return;
          var left = u.cursor.left;
          var parts = [];
          function near(run, step) {
            var at = toX(spec, run, step);
            return at !== null && Math.abs(u.valToPos(at, "x") - left) <= 4;
          }
          if (left !== null && left !== undefined && left >= 0) {
            restarts.forEach(function (m) {
              if (near(m.run, m.x)) parts.push("step " + m.x + " " + m.text);
            });
            own.forEach(function (o) {
              var a = o.a;
              if (near(a.run, a.x)) {
                parts.push("step " + a.x + " " + a.state + " " + a.rule +
                  (a.value !== null && a.value !== undefined && o.watched ? " (" + fmt(a.value) + ")" : "") +
                  ": " + a.message);
              }
            });
            bad.forEach(function (b) {
              if (near(b.run, b.x)) parts.push("step " + b.x + " " + (b.metric || "") + ": NaN/Inf");
            });
            if (ranks.length) {
              var text = ranksText(ranks, u.posToVal(left, "x"), spec.bands.length > 1);
              if (text) parts.push(text);
            }
          }
          hoverBox.textContent = parts.join(" · ");
          if (figure && parts.length) figure.setAttribute("data-hover", hoverBox.textContent);
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

  function baseOptions(spec, el, series, logY, xs) {
    var unit = unitOf(spec);
    var figure = el.closest("figure");
    var wall = unit === "wall";
    var xLabel = wall ? "wall time (since each run's start)" : unit;
    var xAxis = { label: xLabel, values: axisValues };
    if (wall) {
      xAxis.values = function (u, values) { return values.map(fmtDuration); };
      xAxis.incrs = WALL_INCRS;
    }
    return {
      width: Math.max(320, el.clientWidth || 640),
      height: HEIGHT,
      series: [{
        label: wall ? "wall time" : unit,
        value: function (u, v) { return v === null ? "–" : wall ? fmtDuration(v) : fmt(v); },
      }].concat(series),
      scales: { x: xScale(xs), y: logY ? { distr: 3, range: yRangeLog } : { range: yRange } },
      axes: [
        xAxis,
        { label: spec.yLabel, size: 64, values: axisValues },
      ],
      cursor: { sync: { key: "x:" + unit, setSeries: false }, drag: { x: true, y: false } },
      legend: { live: true },
      hooks: { setScale: [onScale], draw: [exposeScales] },
      plugins: [marksPlugin(spec, el.parentNode.querySelector(".alert-hover"), figure)],
    };
  }

  // Per series two columns: the raw values, then their smoothing (series 1+2i and 2+2i).
  function linesData(spec, logY) {
    var tables = spec.series.map(function (s) {
      var xy = seriesXY(spec, s);
      return [xy[0], xy[1], smooth(xy[1], smoothing)];
    });
    var data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    if (logY) {  // a log axis cannot show 0 or negatives: leave them out
      data = data.map(function (col, i) {
        return i === 0 ? col : col.map(function (v) { return v !== null && v !== undefined && v <= 0 ? null : v; });
      });
    }
    return data;
  }

  // Hiding a series from its legend entry hides its raw line too (the raw row is not shown).
  function mirrorRaw(u, index, change) {
    if (!change || change.show === undefined || index < 2 || u.series[index].class === "tm-raw") return;
    var raw = u.series[index - 1];
    if (raw && raw.class === "tm-raw" && raw.show !== change.show) u.setSeries(index - 1, { show: change.show });
  }

  function linesChart(spec, el, logY) {
    var data = linesData(spec, logY);
    var series = [];
    spec.series.forEach(function (s) {
      var dash = s.dash && s.dash.length ? s.dash : undefined;
      series.push({
        label: s.label + " (raw)",
        class: "tm-raw",
        stroke: withAlpha(s.color, RAW_ALPHA),
        width: 1,
        dash: dash,
        value: function (u, v) { return fmt(v); },
      });
      series.push({
        label: s.label,
        stroke: s.color,
        width: 1.5,
        dash: dash,
        value: function (u, v, si, idx) {
          if (!smoothing || idx === null || idx === undefined) return fmt(v);
          return fmt(v) + " (raw " + fmt(u.data[si - 1][idx]) + ")";
        },
      });
    });
    var opts = baseOptions(spec, el, series, logY, data[0]);
    opts.hooks.setSeries = [mirrorRaw];
    var u = new uPlot(opts, data, el);
    exposeSmoothing(el.closest("figure"), u, spec);
    return u;
  }

  function stackedChart(spec, el) {
    var st = spec.stack;
    var lines = [st.total, st.totalMax].filter(function (line) { return !!line; });
    var cols = mapColumns(spec, st.run, st.x, st.parts.map(function (p) { return p.values; })
      .concat(lines.map(function (line) { return line.values; })));
    var xs = cols[0];
    var n = xs.length;
    var data = [xs];
    var raw = [null];
    var series = [];
    var bands = [];
    var sum = new Array(n).fill(0);
    var total = st.total ? cols[1 + st.parts.length] : null;
    function share(v, idx) {
      if (!total || total[idx] === null || !total[idx]) return "";
      return " (" + (100 * v / total[idx]).toFixed(1) + "%)";
    }
    st.parts.forEach(function (p, i) {
      var values = cols[1 + i];
      sum = sum.map(function (c, j) { var v = values[j]; return c + (v === null ? 0 : v); });
      data.push(sum.slice());
      raw.push(values);
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
    lines.forEach(function (line, k) {
      var values = cols[1 + st.parts.length + k];
      data.push(values);
      raw.push(values);
      series.push({
        label: line.label,
        stroke: line === st.total ? "#222222" : "#888888",
        width: line === st.total ? 1.5 : 1,
        dash: line === st.total ? undefined : [4, 3],
        value: function (u, v) { return v === null ? "–" : fmt(v) + " ms"; },
      });
    });
    var opts = baseOptions(spec, el, series, false, xs);
    opts.bands = bands;
    opts.scales.y = { range: function (u, min, max) { return [0, max > 0 ? max * 1.05 : 1]; } };
    return new uPlot(opts, data, el);
  }

  // Min–max over ranks filled, the mean drawn on top; hovering names the slowest rank there.
  function bandChart(spec, el) {
    var tables = [];
    var series = [];
    var bands = [];
    var index = 1;
    spec.bands.forEach(function (b) {
      var table = mapColumns(spec, b.run, b.x, b.mean ? [b.min, b.max, b.mean] : [b.min, b.max]);
      series.push({ label: b.label + " min", stroke: withAlpha(b.color, 0.6), width: 1, value: function (u, v) { return fmt(v); } });
      series.push({ label: b.label + " max", stroke: withAlpha(b.color, 0.6), width: 1, value: function (u, v) { return fmt(v); } });
      bands.push({ series: [index + 1, index], fill: withAlpha(b.color, 0.18) });
      index += 2;
      if (b.mean) {
        series.push({ label: b.label + " mean", stroke: b.color, width: 1.5, value: function (u, v) { return fmt(v); } });
        index += 1;
      }
      tables.push(table);
    });
    var data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    var opts = baseOptions(spec, el, series, false, data[0]);
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

  smoothingControl();
  var initialSmoothing = urlSmoothing();
  setSmoothing(initialSmoothing === null ? "0" : String(initialSmoothing));
  xControl();
  var initialX = hashGet("x");
  if (initialX === null) initialX = new URLSearchParams(location.search).get("x");
  setXMode(initialX === null ? "step" : initialX);

  payload.charts.forEach(function (spec) {
    var figure = document.getElementById(spec.id);
    if (!figure) return;
    var el = figure.querySelector(".plot");
    try {
      var entry = { spec: spec, xUnit: unitOf(spec), u: build(spec, el, false), figure: figure, logY: false };
      exposeUnit(figure, spec);
      entry.range = dataRange(entry.u);  // replaced by uPlot's committed range once drawn
      plots.push(entry);
      figure.setAttribute("data-rendered", "1");
      var toggle = figure.querySelector("input.logy");
      if (toggle) {
        toggle.addEventListener("change", function () {
          // the x range shown; a chart rebuilt this tick has none yet: the one asked of it
          var x = entry.u.scales.x;
          if (x.min !== null && x.min !== undefined && x.max !== null && x.max !== undefined) {
            entry.view = { min: x.min, max: x.max };
          }
          entry.u.destroy();
          syncing = true;  // the new chart's first scale is its own, not a user's zoom
          try {
            entry.logY = toggle.checked;
            entry.u = build(spec, el, toggle.checked);
            if (entry.view) entry.u.setScale("x", { min: entry.view.min, max: entry.view.max });
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

  // A link followed inside the page (#train) drops the fragment's smoothing and x: put them
  // back next to the anchor; a fragment that names them (back, an edited address) sets them.
  window.addEventListener("hashchange", function () {
    var text = hashGet("smoothing");
    var x = hashGet("x");
    if (text !== null) setSmoothing(text);
    if (x !== null) setXMode(x);
    if (text === null || x === null) writeStateToUrl();
  });

  // #train&smoothing=0.9 names no element: scroll to the anchor it holds.
  (function () {
    if (!location.hash || document.getElementById(location.hash.slice(1))) return;
    var anchor = hashPairs().filter(function (p) {
      return !p[1] && p[0] !== SELFTEST && document.getElementById(p[0]);
    })[0];
    if (anchor) document.getElementById(anchor[0]).scrollIntoView();
  })();

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
    function done() {
      // milliseconds from the page's navigation to its charts drawn (benchmarks read it)
      body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
      body.setAttribute("data-ready", "1");
    }
    if (hashGet(SELFTEST) !== null) selfTest(done);
    else done();
  }, 0);

  // -- a live page (trainmon report --serve: assets/live.js changes the specs' data) --------

  // Draws the charts of ``entries`` ({plot, rebuild}) again from their specs: a chart showing
  // its whole range follows the data, a zoomed one keeps its zoom; ``rebuild`` (or a chart that
  // is not a lines chart, or had a single x) makes the chart anew, as its marks are read from
  // the spec when it is built. Zoom sync stays off until uPlot has committed the new scales.
  function redrawCharts(entries) {
    syncing = true;
    var views = entries.map(function (e) {
      var p = e.plot;
      var sc = p.u.scales.x;
      var zoomed = p.range && sc.min !== null && sc.min !== undefined &&
        (sc.min > p.range[0] || sc.max < p.range[1]);
      var view = zoomed ? { min: sc.min, max: sc.max } : null;
      if (e.rebuild || p.spec.kind !== "lines" || xScale(p.u.data[0]).auto === false) {
        p.u.destroy();
        p.u = build(p.spec, p.figure.querySelector(".plot"), p.logY);
        if (view) p.u.setScale("x", view);
      } else {
        p.u.setData(linesData(p.spec, p.logY), !view);
        if (view) p.u.redraw();
      }
      if (p.spec.kind === "lines") exposeSmoothing(p.figure, p.u, p.spec);
      if (view) p.range = dataRange(p.u);
      return view;
    });
    setTimeout(function () {
      entries.forEach(function (e, i) {
        if (!views[i]) e.plot.range = [e.plot.u.scales.x.min, e.plot.u.scales.x.max];
      });
      syncing = false;
    }, 0);
  }

  window.__trainmonReport = { payload: payload, plots: plots, redraw: redrawCharts };

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
          smoothingSelfTest(done);
        }, 0);
      }, 0);
    }, 0);
  }

  // Moves the slider to 0.6 (body[data-selftest-url]: the address after it), hovers the first
  // line chart (its legend then shows smoothed and raw values), then follows the link to
  // #overview (body[data-selftest-nav]: the address after the link).
  function smoothingSelfTest(done) {
    if (!slider) {
      done();
      return;
    }
    slider.value = "0.6";
    slider.dispatchEvent(new Event("input"));
    body.setAttribute("data-selftest-url", location.hash);
    var lines = plots.filter(function (p) { return p.spec.kind === "lines"; })[0];
    if (lines) lines.u.setCursor({ left: lines.u.bbox.width / 2 / (window.devicePixelRatio || 1), top: 20 });
    var finished = false;
    function finish() {
      if (finished) return;
      finished = true;
      window.removeEventListener("hashchange", onHash);
      body.setAttribute("data-selftest-nav", location.hash);
      done();
    }
    function onHash() { setTimeout(finish, 0); }
    window.addEventListener("hashchange", onHash);
    setTimeout(finish, 2000);  // no hashchange: report what the address is
    location.hash = "overview";
  }
})();
