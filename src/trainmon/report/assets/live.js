/* trainmon report --serve: keeps the report page current as the runs are written, no reload.
 *
 * Every ~2 s (?poll=SECONDS in the address changes it) the page asks data.json?since=<its
 * version> what changed (report/live.py's LiveRuns.updates): nothing ({version} alone);
 * "append": per series the points logged since, added to its line charts (uPlot's
 * setData(data, false): the zoom a person chose stays), with the step-time breakdown and rank
 * bands planned again from their new data, and per run the times of its new steps (appended to
 * the page's clock, for the wall-time axis); "full" (a run read again from its start, a new
 * alert, or a page far behind): every chart's data anew, drawn again keeping the zoom; a page
 * whose charts differ from the new ones (a new metric) reloads. The header's runs, the
 * overview, the alerts and the metric tables are swapped in as the server renders them. A page
 * whose charts grew past 4x the report's buckets asks for everything (down-sampled) again.
 * ?zoom=LO,HI in the address opens it zoomed on x LO..HI.
 *
 * Exposed for tests and curious people: body[data-live-version] (the version shown),
 * body[data-live-updates] (updates drawn), body[data-live-state] ("live", "offline" while the
 * server does not answer, "reloading"); on each figure data-points (its x values as drawn),
 * data-points-at-load (as the page was loaded) and data-last-x.
 */
(function () {
  "use strict";
  var report = window.__trainmonReport;
  var body = document.body;
  var config = JSON.parse(document.getElementById("trainmon-live").textContent);
  if (!report) return;
  var payload = report.payload;
  var version = config.version;
  var updates = 0;
  var wantFull = false;
  var limit = 4 * (config.buckets || 2000);
  var seconds = parseFloat(new URLSearchParams(location.search).get("poll"));
  var interval = 1000 * (isFinite(seconds) && seconds > 0 ? seconds : config.poll);

  var badge = document.createElement("span");
  badge.id = "live-state";
  badge.className = "muted";
  badge.title = "this page follows the run: new points are drawn as they are logged";
  var nav = document.querySelector("nav");
  if (nav) nav.appendChild(badge);

  function state(text, detail) {
    body.setAttribute("data-live-state", text);
    badge.textContent = "● " + text + (detail ? " · " + detail : "");
    badge.style.color = text === "live" ? "#2ca02c" : "#888888";
  }

  function expose() {
    report.plots.forEach(function (p) {
      var xs = p.u.data[0];
      p.figure.setAttribute("data-points", String(xs.length));
      p.figure.setAttribute("data-last-x", xs.length ? String(xs[xs.length - 1]) : "");
    });
    body.setAttribute("data-live-version", String(version));
    body.setAttribute("data-live-updates", String(updates));
  }

  // -- charts -----------------------------------------------------------------------------

  function seriesKeys(c) {
    if (c.kind === "lines") return c.series.map(function (s) { return s.run + ":" + s.metric; });
    if (c.kind === "stacked") return [c.stack.run].concat(c.stack.parts.map(function (p) { return p.label; }));
    return c.bands.map(function (b) { return b.run + ":" + (b.mean ? "mean" : ""); });
  }

  function layout(charts) {
    return charts.map(function (c) {
      return [c.id, c.kind, c.title, seriesKeys(c).join(",")].join("|");
    }).join("\n");
  }

  // Copies ``fresh`` into ``spec`` (the object the page's closures hold), keeping its id.
  function assign(spec, fresh) {
    var id = spec.id;
    var fam = spec.family;
    Object.keys(fresh).forEach(function (k) { spec[k] = fresh[k]; });
    spec.id = id;
    spec.family = fam;
  }

  function append(data) {
    var tails = {};
    data.series.forEach(function (t) { tails[t.run + "\u0000" + t.metric] = t; });
    var touched = [];
    report.plots.forEach(function (p) {
      if (p.spec.kind !== "lines") return;
      var changed = false;
      var marks = false;
      p.spec.series.forEach(function (s) {
        var t = tails[s.run + "\u0000" + s.metric];
        if (!t) return;
        var last = s.x.length ? s.x[s.x.length - 1] : -Infinity;
        for (var i = 0; i < t.x.length; i++) {
          if (t.x[i] > last) {
            s.x.push(t.x[i]);
            s.y.push(t.y[i]);
            changed = true;
          }
        }
        t.nonfinite.forEach(function (x) {
          if (x > last) {
            s.nonfinite.push(x);
            s.nonfiniteCount = (s.nonfiniteCount || 0) + 1;
            marks = true;
          }
        });
        if (s.x.length > limit) wantFull = true;
      });
      if (changed) touched.push({ plot: p, rebuild: marks });
    });
    var planned = {};
    data.charts.forEach(function (c) { planned[c.kind + "|" + c.title] = c; });
    report.plots.forEach(function (p) {
      if (p.spec.kind === "lines") return;
      var c = planned[p.spec.kind + "|" + p.spec.title];
      if (!c || c.points === p.spec.points) return;
      assign(p.spec, c);
      touched.push({ plot: p, rebuild: true });
    });
    report.redraw(touched);
  }

  function full(data) {
    if (layout(data.charts) !== layout(payload.charts)) {
      state("reloading", "the charts changed");
      location.reload();
      return false;
    }
    var alerts = payload.alerts;
    alerts.splice.apply(alerts, [0, alerts.length].concat(data.alerts));
    var byId = {};
    data.charts.forEach(function (c) { byId[c.id] = c; });
    var touched = [];
    report.plots.forEach(function (p) {
      var c = byId[p.spec.id];
      if (!c) return;
      assign(p.spec, c);
      touched.push({ plot: p, rebuild: true });
    });
    report.redraw(touched);
    wantFull = false;
    return true;
  }

  // -- the rest of the page ---------------------------------------------------------------

  function swap(selector, html) {
    var old = document.querySelector(selector);
    if (!old || !html) return;
    var holder = document.createElement("div");
    holder.innerHTML = html;
    var fresh = holder.firstElementChild;
    if (!fresh) return;
    var was = old.querySelectorAll("details");
    var now = fresh.querySelectorAll("details");
    for (var i = 0; i < was.length && i < now.length; i++) now[i].open = was[i].open;
    old.parentNode.replaceChild(fresh, old);
  }

  function apply(data) {
    (data.runs || []).forEach(function (r, i) {
      var info = payload.runs[i];
      if (!info) return;
      info.samples = r.samples;
      if (r.wall && r.wall.tail && info.wall) {  // the clock's points since the page's version
        var last = info.wall.x.length ? info.wall.x[info.wall.x.length - 1] : -Infinity;
        for (var k = 0; k < r.wall.x.length; k++) {
          if (r.wall.x[k] <= last) continue;
          info.wall.x.push(r.wall.x[k]);
          info.wall.y.push(r.wall.y[k]);
        }
      } else {
        info.wall = r.wall && r.wall.tail ? null : r.wall;  // a tail without a clock: wait
      }
      if (r.restarts) info.restarts = r.restarts;
    });
    if (data.mode === "full") {
      if (!full(data)) return;
    } else {
      append(data);
    }
    var s = data.sections || {};
    swap("header > ul.runs", s.runs);
    swap("#overview", s.overview);
    swap("#alerts", s.alerts);
    swap("#metrics", s.metrics);
    version = data.version;
    updates++;
    expose();
  }

  function poll() {
    var answered = false;
    var url = "data.json?since=" + encodeURIComponent(version) + (wantFull ? "&full=1" : "");
    fetch(url, { cache: "no-store" }).then(function (response) {
      if (!response.ok) throw new Error("data.json: HTTP " + response.status);
      return response.json();
    }).then(function (data) {
      answered = true;
      if (data.mode) apply(data);
      if (body.getAttribute("data-live-state") !== "reloading") {
        state("live", "updated " + new Date().toLocaleTimeString());
      }
    }).catch(function (err) {
      if (!answered) {
        state("offline", "the server does not answer");
        return;
      }
      setTimeout(function () { throw err; }, 0);  // counted by the page's error handler
    }).then(function () {
      if (body.getAttribute("data-live-state") !== "reloading") setTimeout(poll, interval);
    });
  }

  state("live");
  expose();
  report.plots.forEach(function (p) {
    p.figure.setAttribute("data-points-at-load", p.figure.getAttribute("data-points"));
  });
  // ?zoom=LO,HI opens the page zoomed on x LO..HI, as if a person had dragged over it (what
  // the tests use to check that a zoom stays while points arrive).
  var zoom = (new URLSearchParams(location.search).get("zoom") || "").split(",").map(parseFloat);
  if (zoom.length === 2 && zoom[0] < zoom[1]) {
    setTimeout(function () {  // after report.js's first tick: the charts' full ranges are known
      var first = report.plots[0];
      if (first) first.u.setScale("x", { min: zoom[0], max: zoom[1] });
    }, 0);
  }
  setTimeout(poll, interval);
})();
