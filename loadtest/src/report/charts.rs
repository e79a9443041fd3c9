//! The report's charts, drawn in the page by uPlot (1.6.32, MIT,
//! `vendor/uplot/`), inlined whole so report.html stays one file: the
//! latency-by-percentile curve of every method, client and server, and
//! each method's run second by second with its faults marked. The figures
//! come from results.json's entries (`latencyHistograms`, `perSecond`), so
//! a report redrawn from results.json, or two overlaid, draws the same.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::distribution::Entry;
use crate::histograms;

/// uPlot's stylesheet, for the page's head.
pub const UPLOT_CSS: &str = include_str!("../../../vendor/uplot/uPlot.min.css");
const UPLOT_JS: &str = include_str!("../../../vendor/uplot/uPlot.iife.min.js");
/// What turns the figures into charts, with uPlot.
const CHARTS_JS: &str = include_str!("charts.js");

/// The charts' own styles.
pub const CHARTS_CSS: &str = "\
.chart { margin: 0.5rem 0 1rem; }
.chart .u-legend { font-size: 0.85rem; text-align: left; }
.timelines { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 0 1.5rem; }
";

/// One run's methods, as results.json names them; `run` tells two
/// overlaid runs apart (`None` for a run alone).
pub struct Run<'a> {
    pub run: Option<&'a str>,
    /// results.json's `methods`: method → entry.
    pub methods: &'a BTreeMap<String, Entry>,
}

/// The charts' section: the percentile curves, then each method's seconds.
pub fn section(out: &mut String, runs: &[Run]) {
    let mut curves = Vec::new();
    let mut timelines = Vec::new();
    for Run { run, methods } in runs {
        for (method, entry) in methods.iter() {
            if let Some(encoded) = &entry.latency_histograms {
                let sides = [
                    ("client", Some(&encoded.client)),
                    ("server", encoded.server.as_ref()),
                ];
                for (side, text) in sides {
                    let Some(histogram) = text.and_then(|text| histograms::decode(text).ok())
                    else {
                        continue;
                    };
                    curves.push(json!({
                        "method": method, "side": side, "run": run,
                        "count": histogram.len(),
                        "points": histograms::curve(&histogram),
                    }));
                }
            }
            if !entry.per_second.is_empty() {
                let faults: Vec<Value> = entry
                    .faults
                    .iter()
                    .map(|fired| json!({ "at": fired.fired_at_ms / 1000.0, "fault": fired.fault }))
                    .collect();
                timelines.push(json!({
                    "method": method, "run": run,
                    "total": entry.result.total_count,
                    "seconds": entry.per_second,
                    "faults": faults,
                }));
            }
        }
    }
    if curves.is_empty() && timelines.is_empty() {
        return;
    }
    let data = json!({ "curves": curves, "timelines": timelines });
    out.push_str(
        "<h2>Latency by percentile</h2>\n<p class=\"note\">Every request's latency, \
         client (k6) and server (its own record), as HdrHistograms of three significant \
         digits; the percentile axis is logarithmic in 1/(1−p), to 99.99 %. Each line ends at \
         its highest latency, drawn at the rank one request stands for. Hover for values, drag \
         to zoom, double-click to zoom out.</p>\n<div id=\"percentiles\" class=\"chart\"></div>\n\
         <h2>Second by second</h2>\n<p class=\"note\">Answers per second by outcome, issued \
         (200 or 202) so far against the coupon's total, and each second's p50 and p99 (client); \
         for a method that answers 202, the confirmation lag (202 → issue recorded) of the 202s \
         confirmed in each second. A red line marks a fault firing.</p>\n<div id=\"timelines\" class=\"timelines\"></div>\n",
    );
    // In a script element only `</` could end it early.
    let data = data.to_string().replace("</", "<\\/");
    let _ = write!(
        out,
        "<script type=\"application/json\" id=\"chart-data\">{data}</script>\n\
         <script>\n{UPLOT_JS}\n</script>\n<script>\n{CHARTS_JS}</script>\n"
    );
}
