//! A soak's samples, and its report in the load runner's form
//! (`report.md`, whose first line titles the run in the console's list;
//! `report.html`, self-contained, a chart a figure; `samples.csv`;
//! `results.json` with the samples and the provenance): each figure's
//! trend past the warm-up and its verdict (`verdict.rs`).

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::report::markup::{REPORT_CSS, esc};

/// One sample of the figures.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub at_s: f64,
    pub accepted: u64,
    pub coupons: u64,
    /// In the order of [`FIGURES`].
    pub values: Vec<f64>,
}

/// The figures sampled, their units, and whether they must stay flat.
pub const FIGURES: [(&str, &str, bool); 10] = [
    ("server RSS", "MiB", true),
    ("open files", "", true),
    ("database connections", "", true),
    ("Redis memory", "MiB", false),
    ("Redis keys", "", false),
    ("stream entries", "", false),
    ("stream pending", "", true),
    ("recorder: live coupons", "", true),
    ("result read", "ms", true),
    ("issue p99", "ms", true),
];
pub struct Soak {
    pub title: String,
    /// The engine the lab ran on, as `--engine` names it.
    pub engine: &'static str,
    /// Its server, as the lab names it (`GET /lab/strategies`): product
    /// and version.
    pub database: String,
    pub trim: bool,
    pub samples: Vec<Sample>,
    pub provenance: Value,
    pub out: PathBuf,
}

impl Soak {
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| figure | first | last | growth over the run | per accepted request | per coupon | verdict |\n\
             |---|---:|---:|---:|---:|---:|---|\n",
        );
        for row in self.rows() {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        out
    }

    fn description(&self) -> String {
        let judged_from = self.judged().first().map_or(0.0, |s| s.at_s);
        let last = self.samples.last().cloned().unwrap_or_default();
        format!(
            "{} samples over {:.0} s, {} requests accepted, {} coupons in the lab at the end; \
             the lab's database: {}; streams {}; judged from {judged_from:.0} s \
             (the first quarter is the warm-up).",
            self.samples.len(),
            last.at_s,
            last.accepted,
            last.coupons,
            self.database,
            if self.trim {
                "trimmed (COUPONLAB_STREAM_TRIM)"
            } else {
                "kept whole"
            },
        )
    }

    /// Writes the report into its directory.
    pub fn write(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.out)?;
        let markdown = format!(
            "# {}\n\n{}\n\n{}\nReproduce: `{}` ({}).\n",
            self.title,
            self.description(),
            self.table(),
            self.provenance["command"].as_str().unwrap_or_default(),
            self.provenance["commit"].as_str().unwrap_or_default(),
        );
        std::fs::write(self.out.join("report.md"), markdown)?;
        std::fs::write(self.out.join("report.html"), self.html())?;
        std::fs::write(self.out.join("samples.csv"), self.csv())?;
        let samples: Vec<Value> = self
            .samples
            .iter()
            .map(|s| json!({ "atS": s.at_s, "accepted": s.accepted, "coupons": s.coupons, "values": s.values }))
            .collect();
        let figures: Vec<Value> = FIGURES
            .iter()
            .map(|(name, unit, flat)| json!({ "name": name, "unit": unit, "mustBeFlat": flat }))
            .collect();
        let results = json!({
            "title": self.title, "engine": self.engine, "database": self.database,
            "trim": self.trim, "provenance": self.provenance,
            "figures": figures, "samples": samples,
        });
        std::fs::write(
            self.out.join("results.json"),
            serde_json::to_string_pretty(&results)?,
        )?;
        Ok(())
    }

    fn csv(&self) -> String {
        let mut csv = String::from("seconds,accepted,coupons");
        for (name, unit, _) in FIGURES {
            let _ = write!(csv, ",{name} ({unit})");
        }
        for s in &self.samples {
            let _ = write!(csv, "\n{:.1},{},{}", s.at_s, s.accepted, s.coupons);
            for v in &s.values {
                let _ = write!(csv, ",{v:.3}");
            }
        }
        csv + "\n"
    }

    /// The table, and a line chart a figure over time.
    fn html(&self) -> String {
        let title = esc(&self.title);
        let mut page = format!(
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{title}</title>\n<style>\n{REPORT_CSS}</style>\n</head>\n<body>\n\
             <h1>{title}</h1>\n<p>{}</p>\n<div class=\"scroll\"><table>\n<thead><tr>\
             <th>figure</th><th class=\"num\">first</th><th class=\"num\">last</th>\
             <th class=\"num\">growth over the run</th><th class=\"num\">per accepted request</th>\
             <th class=\"num\">per coupon</th><th>verdict</th></tr></thead>\n<tbody>\n",
            esc(&self.description())
        );
        for row in self.rows() {
            page.push_str("<tr>");
            for (i, cell) in row.iter().enumerate() {
                let class = if (1..6).contains(&i) {
                    " class=\"num\""
                } else {
                    ""
                };
                let _ = write!(page, "<td{class}>{}</td>", esc(cell));
            }
            page.push_str("</tr>\n");
        }
        page.push_str("</tbody></table></div>\n");
        for (f, (name, unit, _)) in FIGURES.iter().enumerate() {
            page.push_str(&chart(&self.samples, f, name, unit));
        }
        let _ = write!(
            page,
            "<h2>Reproduction</h2>\n<pre>{}</pre>\n<p class=\"note\">commit {}</p>\n</body>\n</html>\n",
            esc(self.provenance["command"].as_str().unwrap_or_default()),
            esc(self.provenance["commit"].as_str().unwrap_or_default()),
        );
        page
    }
}

/// One figure over time, as inline SVG scaled to its highest sample.
fn chart(samples: &[Sample], figure: usize, name: &str, unit: &str) -> String {
    let (width, height) = (600.0, 120.0);
    let end = samples.last().map_or(1.0, |s| s.at_s.max(1.0));
    let top = samples
        .iter()
        .map(|s| s.values[figure])
        .fold(0.0_f64, f64::max)
        .max(1e-9);
    let points: Vec<String> = samples
        .iter()
        .map(|s| {
            format!(
                "{:.1},{:.1}",
                s.at_s / end * width,
                height - s.values[figure] / top * height
            )
        })
        .collect();
    format!(
        "<h2>{name}</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {h}\" \
         role=\"img\" aria-label=\"{name} over time\">\
         <polyline fill=\"none\" stroke=\"#36c\" stroke-width=\"2\" points=\"{}\"/>\
         <text x=\"4\" y=\"12\">{top:.2} {unit}</text><text x=\"4\" y=\"{h}\">0 · {end:.0} s</text></svg>\n",
        points.join(" "),
        h = height + 14.0,
    )
}
