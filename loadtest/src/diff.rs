//! Reports from reports: `loadtest redraw DIR` writes a run's report again
//! from its results.json (and the request records beside it), and
//! `loadtest diff RUN_A RUN_B` writes one report that overlays two runs:
//! each method's percentile curves and seconds from both, the figures'
//! differences with their spreads, and what changed between the runs.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::histograms;
use crate::paths;
use crate::report::charts::{self, Run};
use crate::report::distribution::Results;
use crate::report::figures::FIGURES;
use crate::report::markup::Table;
use crate::report::{self, Column, Provenance, Row, html, shown};

/// `loadtest redraw DIR`.
#[derive(Args)]
pub struct Redraw {
    /// A run's report directory: its results.json and request records
    dir: PathBuf,
}

/// `loadtest diff RUN_A RUN_B`.
#[derive(Args)]
pub struct Diff {
    /// The first run's report directory (the baseline)
    run_a: PathBuf,
    /// The second run's report directory
    run_b: PathBuf,
    /// Where the report goes (default: loadtest/reports/<UTC time>-diff/)
    #[arg(long)]
    out: Option<PathBuf>,
}

impl Results {
    /// Each method's row: its figures as the run measured them, with the
    /// spread over rounds where it had rounds (the drain, which results.json
    /// keeps only as a spread, is left out of a run of one round).
    fn rows(&self) -> Vec<Row> {
        self.entries
            .iter()
            .map(|(method, entry)| {
                let verification = entry.verification.clone();
                let mut row = Row::from(method, &entry.k6, &entry.result, None, verification);
                row.why.example = entry.example_trace.clone();
                for figure in &FIGURES {
                    if let Some(spread) = entry.spread.get(figure.heading) {
                        row.ranges.insert(figure.heading, *spread);
                    }
                }
                row
            })
            .collect()
    }
}

/// Writes the run's report again from its results.json.
pub fn redraw(options: &Redraw) -> anyhow::Result<()> {
    let results = Results::read(&options.dir)?;
    report::write(
        &options.dir,
        &results.title,
        &results.description,
        &results.rows(),
        &results.methods,
        &results.provenance,
    )?;
    println!("report: {}", options.dir.join("report.html").display());
    Ok(())
}

/// Writes the report of two runs overlaid.
pub fn diff(options: &Diff) -> anyhow::Result<()> {
    let (a, b) = (
        Results::read(&options.run_a)?,
        Results::read(&options.run_b)?,
    );
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| paths::new_report_dir("-diff"));
    std::fs::create_dir_all(&out)?;
    let name = |dir: &Path| {
        dir.file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into())
    };
    let (name_a, name_b) = (name(&options.run_a), name(&options.run_b));
    let page = render(&a, &b, &name_a, &name_b)?;
    std::fs::write(out.join("report.html"), page)?;
    println!("report: {}", out.join("report.html").display());
    Ok(())
}

/// The page: what changed, the differences, then the charts of both runs.
fn render(a: &Results, b: &Results, name_a: &str, name_b: &str) -> anyhow::Result<String> {
    let description = format!(
        "A: {name_a} ({}); B: {name_b} ({}). A's lines are solid, B's dotted; the server's dashed.",
        a.title, b.title
    );
    let mut out = html::page_start("Two runs side by side", &description);
    out.push_str("<h2>What changed</h2>\n");
    changed(&mut out, a, b)?;
    out.push_str("<h2>Differences (B − A)</h2>\n");
    differences(&mut out, a, b);
    charts::section(
        &mut out,
        &[
            Run {
                run: Some("A"),
                methods: &a.entries,
            },
            Run {
                run: Some("B"),
                methods: &b.entries,
            },
        ],
    );
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

/// The provenance of both runs, field by field, and each method's engine.
fn changed(out: &mut String, a: &Results, b: &Results) -> anyhow::Result<()> {
    let (provenance_a, provenance_b) = (
        Provenance::read(&a.provenance)?,
        Provenance::read(&b.provenance)?,
    );
    let fields: [Column<Provenance>; 7] = [
        ("commit", |p| shown(&p.commit).to_string()),
        ("command", |p| shown(&p.command).to_string()),
        ("cores", |p| {
            p.cores.map_or("—".to_string(), |c| c.to_string())
        }),
        ("Redis", |p| shown(&p.versions.redis).to_string()),
        ("database", |p| shown(&p.versions.database).to_string()),
        ("k6", |p| shown(&p.versions.k6).to_string()),
        ("Rust", |p| shown(&p.versions.rust).to_string()),
    ];
    let mut lines: Vec<(String, String, String)> = fields
        .iter()
        .map(|(name, field)| (name.to_string(), field(&provenance_a), field(&provenance_b)))
        .collect();
    let engine = |results: &Results, method: &str| {
        results
            .entries
            .get(method)
            .map_or("—".to_string(), |entry| {
                let engine = &entry.result.engine;
                let settings: Vec<String> = engine
                    .settings
                    .iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect();
                format!("{} {} {}", engine.name, engine.version, settings.join(" "))
                    .trim_end()
                    .to_string()
            })
    };
    for method in methods_of(a, b) {
        lines.push((
            format!("{method}: engine"),
            engine(a, &method),
            engine(b, &method),
        ));
    }
    let body = lines.into_iter().map(|(name, in_a, in_b)| {
        let verdict = if in_a == in_b { "same" } else { "changed" };
        (name, vec![in_a, in_b, verdict.to_string()])
    });
    Table {
        first: "",
        ..Table::of_methods("changed", vec!["run A", "run B", "between them"], body)
    }
    .html(out);
    Ok(())
}

/// Every method of either run, in order.
fn methods_of(a: &Results, b: &Results) -> Vec<String> {
    let mut methods: Vec<String> = a.entries.keys().chain(b.entries.keys()).cloned().collect();
    methods.sort();
    methods.dedup();
    methods
}

/// Each figure of each method in both runs, as each report shows it (over
/// rounds: the median and its range), and B's change from A.
fn differences(out: &mut String, a: &Results, b: &Results) {
    let (rows_a, rows_b) = (a.rows(), b.rows());
    let find = |rows: &[Row], method: &str| rows.iter().find(|r| r.method == method).cloned();
    let mut body = Vec::new();
    for method in methods_of(a, b) {
        let (Some(row_a), Some(row_b)) = (find(&rows_a, &method), find(&rows_b, &method)) else {
            body.push((method, vec!["in one run only".to_string(); 4]));
            continue;
        };
        for figure in &FIGURES {
            let (value_a, value_b) = ((figure.value)(&row_a), (figure.value)(&row_b));
            body.push((
                format!("{method} · {}", figure.heading),
                change(figure.cell(&row_a), figure.cell(&row_b), value_a, value_b),
            ));
        }
        let percentiles = [
            ("client", 0.999, "p99.9"),
            ("server", 0.99, "p99"),
            ("server", 0.999, "p99.9"),
        ];
        for (side, quantile, name) in percentiles {
            let percentile = |results: &Results| {
                let encoded = results.entries.get(&method)?.latency_histograms.as_ref()?;
                let text = if side == "client" {
                    Some(&encoded.client)
                } else {
                    encoded.server.as_ref()
                };
                let histogram = histograms::decode(text?).ok()?;
                Some(histograms::percentile_ms(&histogram, quantile))
            };
            let (value_a, value_b) = (percentile(a), percentile(b));
            let cell = |value: Option<f64>| value.map_or("—".to_string(), |v| format!("{v:.1}"));
            body.push((
                format!("{method} · {side} {name} ms"),
                change(cell(value_a), cell(value_b), value_a, value_b),
            ));
        }
    }
    // A figure neither run has (a server histogram of an older run) is
    // left out.
    let body = body
        .into_iter()
        .filter(|(_, cells)| cells[..2] != ["—", "—"]);
    Table {
        first: "figure",
        ..Table::of_methods(
            "differences",
            vec!["run A", "run B", "B − A", "change"],
            body,
        )
    }
    .html(out);
}

/// A figure's cells in both runs, its difference and its relative change.
fn change(cell_a: String, cell_b: String, a: Option<f64>, b: Option<f64>) -> Vec<String> {
    let (difference, relative) = match (a, b) {
        (Some(a), Some(b)) => (
            format!("{:+.1}", b - a),
            if a == 0.0 {
                "—".to_string()
            } else {
                format!("{:+.0} %", (b - a) / a * 100.0)
            },
        ),
        _ => ("—".to_string(), "—".to_string()),
    };
    vec![cell_a, cell_b, difference, relative]
}
