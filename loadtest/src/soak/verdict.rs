//! Whether a soak's figures that must stay flat did: each figure's trend
//! past the warm-up, its growth against its level and its noise, and the
//! verdict that fails the run naming every figure that kept growing, and
//! each figure's row of the report.

use anyhow::bail;

use super::report::{FIGURES, Sample, Soak};

/// The stream entries: flat only when the streams are trimmed.
const STREAM_ENTRIES: usize = 5;
/// The samples left out of the verdict while the server warms up.
const WARM_UP_SHARE: f64 = 0.25;

/// How a figure moved over the samples past the warm-up.
struct Trend {
    first: f64,
    last: f64,
    /// The least-squares line's growth over the judged span, and its level
    /// at the span's start.
    growth: f64,
    start: f64,
    /// How far the samples stand from that line (their standard
    /// deviation): a figure that saws up and down within a bound (stream
    /// entries between two trims, a p99) is noisy, not growing.
    noise: f64,
    /// Growth per accepted request, and per coupon created.
    per_accepted: f64,
    per_coupon: f64,
}

impl Soak {
    /// The samples past the warm-up.
    pub(super) fn judged(&self) -> &[Sample] {
        let skip = (self.samples.len() as f64 * WARM_UP_SHARE).floor() as usize;
        &self.samples[skip.min(self.samples.len().saturating_sub(2))..]
    }

    fn trend(&self, figure: usize) -> Trend {
        Self::trend_of(self.judged(), figure)
    }

    /// The figure's trend over `judged`, its growth extrapolated to the
    /// whole judged span.
    fn trend_of(judged: &[Sample], figure: usize) -> Trend {
        let n = judged.len() as f64;
        let y = |s: &Sample| s.values[figure];
        // The least-squares line of the figure against `x`: its slope, and
        // the means it passes through.
        let line = |x: &dyn Fn(&Sample) -> f64| {
            let (mx, my) = judged
                .iter()
                .fold((0.0, 0.0), |(a, b), s| (a + x(s) / n, b + y(s) / n));
            let (sxy, sxx) = judged.iter().fold((0.0, 0.0), |(a, b), s| {
                let dx = x(s) - mx;
                (a + dx * (y(s) - my), b + dx * dx)
            });
            (if sxx == 0.0 { 0.0 } else { sxy / sxx }, mx, my)
        };
        let at = |s: &Sample| s.at_s;
        let (slope, mx, my) = line(&at);
        let squares: f64 = judged
            .iter()
            .map(|s| (y(s) - (my + slope * (s.at_s - mx))).powi(2))
            .sum();
        let (first, last) = (&judged[0], &judged[judged.len() - 1]);
        Trend {
            first: y(first),
            last: y(last),
            growth: slope * (last.at_s - first.at_s),
            start: my + slope * (first.at_s - mx),
            noise: (squares / (n - 2.0).max(1.0)).sqrt(),
            per_accepted: line(&|s| s.accepted as f64).0,
            per_coupon: line(&|s| s.coupons as f64).0,
        }
    }

    /// Whether a figure kept growing: its line rose by more than a quarter
    /// of its level, a small absolute margin and three times the samples'
    /// noise around it (a shared machine's latencies, a figure that saws
    /// between bounds) — and the later half of the samples, on its own,
    /// still rises at a rate that would do the same over the whole span. A
    /// figure growing without bound does both as the run goes on; one that
    /// stepped up once and stayed (a pool that opened the connections a
    /// burst asked for) does not.
    fn grew(&self, figure: usize) -> bool {
        let judged = self.judged();
        let span = judged.last().map_or(0.0, |s| s.at_s) - judged.first().map_or(0.0, |s| s.at_s);
        let margin = match FIGURES[figure].1 {
            "MiB" => 32.0,
            "ms" => 5.0,
            _ => 4.0,
        };
        let rises = |trend: &Trend, growth: f64| {
            growth > margin + 0.25 * trend.start.abs() + 3.0 * trend.noise
        };
        let whole = self.trend(figure);
        let later_half = &judged[judged.len() / 2..];
        let later = Self::trend_of(later_half, figure);
        let later_span = later_half.last().map_or(0.0, |s| s.at_s) - later_half[0].at_s;
        let later_growth = if later_span > 0.0 {
            later.growth * span / later_span
        } else {
            0.0
        };
        rises(&whole, whole.growth) && rises(&later, later_growth)
    }

    fn must_be_flat(&self, figure: usize) -> bool {
        FIGURES[figure].2 || (figure == STREAM_ENTRIES && self.trim)
    }

    /// Fails naming every figure that must be flat and kept growing.
    pub fn verdict(&self) -> anyhow::Result<()> {
        let grown: Vec<&str> = (0..FIGURES.len())
            .filter(|&f| self.must_be_flat(f) && self.grew(f))
            .map(|f| FIGURES[f].0)
            .collect();
        if grown.is_empty() {
            println!(
                "soak: every figure that must be flat stayed flat; report in {}",
                self.out.display()
            );
            return Ok(());
        }
        bail!(
            "soak: {} kept growing; report in {}",
            grown.join(", "),
            self.out.display()
        )
    }

    /// Each figure's row: first, last, growth, per request and per coupon,
    /// verdict.
    pub(super) fn rows(&self) -> Vec<[String; 7]> {
        FIGURES
            .iter()
            .enumerate()
            .map(|(f, (name, unit, _))| {
                let t = self.trend(f);
                let verdict = match (self.must_be_flat(f), self.grew(f)) {
                    (true, false) => "flat",
                    (true, true) => "GROWS",
                    (false, _) => "grows by design (per request or coupon)",
                };
                let name = if unit.is_empty() {
                    name.to_string()
                } else {
                    format!("{name} ({unit})")
                };
                [
                    name,
                    format!("{:.2}", t.first),
                    format!("{:.2}", t.last),
                    format!("{:+.2}", t.growth),
                    format!("{:+.5}", t.per_accepted),
                    format!("{:+.3}", t.per_coupon),
                    verdict.to_string(),
                ]
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::json;

    use super::*;

    fn soak(values: impl Fn(usize) -> Vec<f64>, trim: bool) -> Soak {
        Soak {
            title: "Soak".into(),
            engine: "mariadb",
            database: "mariadb 10.11".into(),
            trim,
            samples: (0..20)
                .map(|i| Sample {
                    at_s: i as f64 * 10.0,
                    accepted: i as u64 * 1_000,
                    coupons: 5 + i as u64,
                    values: values(i),
                })
                .collect(),
            provenance: json!({ "command": "cargo xtask soak", "commit": "abc" }),
            out: PathBuf::new(),
        }
    }

    fn level(i: usize, grows: usize, by: f64) -> Vec<f64> {
        (0..FIGURES.len())
            .map(|f| {
                if f == grows {
                    100.0 + by * i as f64
                } else {
                    50.0 + (i % 2) as f64
                }
            })
            .collect()
    }

    #[test]
    fn a_flat_run_passes_and_a_growing_figure_fails_by_name() {
        assert!(soak(|i| level(i, usize::MAX, 0.0), false).verdict().is_ok());
        let rss_grows = soak(|i| level(i, 0, 10.0), false);
        let err = rss_grows.verdict().unwrap_err().to_string();
        assert!(err.contains("server RSS"), "{err}");
        assert!(rss_grows.table().contains("GROWS"));
    }

    #[test]
    fn a_figure_sawing_between_bounds_is_flat() {
        // Stream entries between two trims: 0 to 20, whenever sampled.
        let sawing = |i: usize| {
            let mut values = level(i, usize::MAX, 0.0);
            values[STREAM_ENTRIES] = [7.0, 11.0, 0.0, 0.0, 4.0, 16.0, 0.0, 0.0, 19.0, 13.0][i % 10];
            values
        };
        assert!(soak(sawing, true).verdict().is_ok());
    }

    #[test]
    fn a_figure_that_stepped_up_once_and_stayed_is_flat() {
        // A pool that opened ten more connections for a burst, halfway.
        let step = |i: usize| {
            let mut values = level(i, usize::MAX, 0.0);
            values[2] = if i < 12 { 9.0 } else { 19.0 };
            values
        };
        assert!(
            soak(step, false).verdict().is_ok(),
            "{}",
            soak(step, false).table()
        );
        // The same figure still rising at the end keeps growing.
        let climbing = |i: usize| {
            let mut values = level(i, usize::MAX, 0.0);
            values[2] = 9.0 + 2.0 * i as f64;
            values
        };
        let err = soak(climbing, false).verdict().unwrap_err().to_string();
        assert!(err.contains("database connections"), "{err}");
    }

    #[test]
    fn stream_entries_may_grow_unless_trimmed() {
        let growing = |i| level(i, STREAM_ENTRIES, 50.0);
        assert!(soak(growing, false).verdict().is_ok());
        let err = soak(growing, true).verdict().unwrap_err().to_string();
        assert!(err.contains("stream entries"), "{err}");
    }

    #[test]
    fn growth_is_reported_per_accepted_request() {
        let table = soak(|i| level(i, 4, 3.0), false).table();
        // 3 keys a sample, 1,000 accepted a sample.
        assert!(table.contains("| Redis keys | "), "{table}");
        assert!(table.contains("+0.00300"), "{table}");
    }
}
