// The report's charts, drawn with uPlot from the figures in #chart-data
// (see charts.rs). Kept on window.couponlabCharts for whoever inspects
// them: the browser tests read the drawn series from there.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const charts = { percentiles: null, timelines: [] };
  window.couponlabCharts = charts;

  // A colour per method, in the order they first appear.
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                   "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
  const methodColours = new Map();
  const methodColour = (method) => {
    if (!methodColours.has(method)) {
      methodColours.set(method, palette[methodColours.size % palette.length]);
    }
    return methodColours.get(method);
  };
  // An outcome's colour is the console's (outcomes.css, inlined above).
  const outcomeColour = (outcome) => {
    const probe = document.createElement("span");
    probe.dataset.outcome = outcome;
    document.body.appendChild(probe);
    const colour = getComputedStyle(probe).getPropertyValue("--outcome").trim();
    probe.remove();
    return colour || "#555";
  };
  const ms = (v) => (v == null ? "—" : v.toFixed(v < 10 ? 2 : 1) + " ms");
  const count = (v) => (v == null ? "—" : String(Math.round(v)));
  const widthOf = (el) => Math.max(320, Math.min(el.clientWidth || 1100, 1160));

  // The percentile axis: x = 1/(1-p), on a log scale, so 90 %, 99 %,
  // 99.9 % and 99.99 % lie a decade apart.
  const toX = (quantile) => 1 / (1 - quantile);
  const percent = (x) => (x == null ? "—" : +(100 * (1 - 1 / x)).toFixed(4) + " %");

  function percentiles() {
    const el = document.getElementById("percentiles");
    if (!el || data.curves.length === 0) return;
    const xs = [...new Set(data.curves.flatMap((c) => c.points.map((p) => toX(p[0]))))]
      .sort((a, b) => a - b);
    const at = new Map(xs.map((x, i) => [x, i]));
    const series = [{ label: "percentile", value: (u, x) => percent(x) }];
    const columns = [xs];
    for (const curve of data.curves) {
      const ys = new Array(xs.length).fill(null);
      for (const [quantile, value] of curve.points) ys[at.get(toX(quantile))] = value;
      columns.push(ys);
      series.push({
        label: [curve.method, curve.side, curve.run].filter(Boolean).join(" · ") +
          ` (${curve.count})`,
        stroke: methodColour(curve.method),
        width: curve.run === "B" ? 1.5 : 2,
        dash: [curve.side === "server" ? [6, 4] : [], curve.run === "B" ? [2, 3] : []]
          .flat(),
        spanGaps: true,
        points: { show: false },
        value: (u, v) => ms(v),
      });
    }
    charts.percentiles = new uPlot({
      width: widthOf(el),
      height: 420,
      series,
      scales: {
        x: { time: false, distr: 3, log: 10, range: [1, 10000] },
        y: { range: (u, min, max) => [0, max > 0 ? max * 1.05 : 1] },
      },
      axes: [
        { label: "percentile", splits: () => [1, 10, 100, 1000, 10000],
          values: (u, splits) => splits.map(percent) },
        { label: "latency (ms)", size: 60 },
      ],
    }, columns, el);
  }

  // A red line and the fault's name where each fault fired.
  const markFaults = (faults) => (u) => {
    const ctx = u.ctx;
    const top = u.bbox.top;
    ctx.save();
    ctx.strokeStyle = ctx.fillStyle = "#c00";
    ctx.lineWidth = 2 * devicePixelRatio;
    ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
    for (const fault of faults) {
      const x = u.valToPos(fault.at, "x", true);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + u.bbox.height);
      ctx.stroke();
      ctx.fillText(fault.fault, x + 4 * devicePixelRatio, top + 12 * devicePixelRatio);
    }
    ctx.restore();
  };

  // A second without an answer has no latency: a gap, not a zero.
  const answered = (second) => (Object.keys(second.outcomes).length > 0 ? true : null);

  function timeline(into, t) {
    const title = document.createElement("h3");
    title.textContent = [t.method, t.run].filter(Boolean).join(" · ");
    const answers = document.createElement("div");
    const latency = document.createElement("div");
    answers.className = latency.className = "chart";
    answers.dataset.method = latency.dataset.method = t.method;
    into.append(title, answers, latency);
    const seconds = t.seconds.map((s) => s.second);
    const outcomes = [...new Set(t.seconds.flatMap((s) => Object.keys(s.outcomes)))].sort();
    const x = { label: "second", value: (u, v) => (v == null ? "—" : v + " s") };
    // Whole seconds only on the time axis: the figures are per second.
    const timeAxis = { label: "second of the run", incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600] };
    const hooks = { draw: [markFaults(t.faults)] };
    const width = widthOf(into);
    charts.timelines.push(new uPlot({
      width: Math.min(width, 1160),
      height: 260,
      hooks,
      series: [x,
        ...outcomes.map((outcome) => ({
          label: outcome + " /s", stroke: outcomeColour(outcome), width: 2, value: (u, v) => count(v),
        })),
        { label: "issued so far", stroke: "#000", width: 2, scale: "count", value: (u, v) => count(v) },
        { label: "total", stroke: "#888", dash: [4, 4], scale: "count", value: (u, v) => count(v) }],
      // Issued counts from zero up to at least the total, not a band
      // around the total that makes a flat line look like a change.
      scales: { x: { time: false }, count: { range: (u, min, max) => [0, Math.max(max, 1)] } },
      axes: [timeAxis, { label: "answers per second", size: 60 },
        { scale: "count", side: 1, label: "issued", size: 60, grid: { show: false } }],
    }, [seconds,
      ...outcomes.map((outcome) => t.seconds.map((s) => s.outcomes[outcome] || 0)),
      t.seconds.map((s) => s.issuedSoFar),
      t.seconds.map(() => t.total)], answers));
    charts.timelines.push(new uPlot({
      width: Math.min(width, 1160),
      height: 200,
      hooks,
      series: [x,
        { label: "p50", stroke: methodColour(t.method), width: 2, value: (u, v) => ms(v) },
        { label: "p99", stroke: methodColour(t.method), dash: [6, 4], width: 2, value: (u, v) => ms(v) }],
      scales: { x: { time: false } },
      axes: [timeAxis, { label: "latency (ms)", size: 60 }],
    }, [seconds, t.seconds.map((s) => answered(s) && s.p50Ms),
      t.seconds.map((s) => answered(s) && s.p99Ms)], latency));
    // A method that answers 202: how long its 202s waited for their issue,
    // by the second the issue was recorded.
    if (!t.seconds.some((s) => s.lagP50Ms != null)) return;
    const lag = document.createElement("div");
    lag.className = "chart lag";
    lag.dataset.method = t.method;
    into.append(lag);
    charts.timelines.push(new uPlot({
      width: Math.min(width, 1160),
      height: 200,
      hooks,
      series: [x,
        { label: "lag p50", stroke: "#6a3d9a", width: 2, value: (u, v) => ms(v) },
        { label: "lag p99", stroke: "#6a3d9a", dash: [6, 4], width: 2, value: (u, v) => ms(v) },
        { label: "confirmed /s", stroke: "#999", width: 1, scale: "count", value: (u, v) => count(v) }],
      scales: { x: { time: false }, count: { range: (u, min, max) => [0, Math.max(max, 1)] } },
      axes: [timeAxis, { label: "confirmation lag (ms)", size: 60 },
        { scale: "count", side: 1, label: "confirmed", size: 60, grid: { show: false } }],
    }, [seconds, t.seconds.map((s) => (s.lagP50Ms == null ? null : s.lagP50Ms)),
      t.seconds.map((s) => (s.lagP99Ms == null ? null : s.lagP99Ms)),
      t.seconds.map((s) => s.confirmed || 0)], lag));
  }

  percentiles();
  const timelines = document.getElementById("timelines");
  if (timelines) {
    for (const t of data.timelines) {
      const cell = document.createElement("section");
      timelines.appendChild(cell);
      timeline(cell, t);
    }
  }
})();
