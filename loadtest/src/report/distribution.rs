//! What results.json keeps of each run beyond its figures: the latency
//! histograms (client and server) and the run second by second, taken from
//! the request records the run wrote beside the report, so the charts are
//! redrawn, and runs compared, from results.json alone.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::histograms::{self, Encoded, Second};
use crate::records;

/// The part of a method's results.json entry the charts read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Entry {
    /// The file of its request records, beside the report.
    pub request_records: Option<String>,
    pub latency_histograms: Option<Encoded>,
    pub per_second: Vec<Second>,
    /// The faults that fired during the run (`firedAtMs` from its start).
    pub faults: Vec<Value>,
    pub result: Outcome,
    /// Over several rounds, every round's entry.
    pub rounds: Vec<Value>,
}

/// The server's result, as far as the charts need it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Outcome {
    pub total_count: u64,
    pub requests: Requests,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Requests {
    /// hdrhistogram's V2, hex-encoded, of the server's latencies (µs).
    pub latency_histogram_us: Option<String>,
}

/// Adds `latencyHistograms` and `perSecond` to each entry of `methods`
/// (and to each of its rounds) whose request records lie in `dir`; an
/// entry that has them already, or whose records are gone, stays as it is.
pub fn enrich(dir: &Path, methods: &mut BTreeMap<String, Value>) -> anyhow::Result<()> {
    for entry in methods.values_mut() {
        enrich_entry(dir, entry)?;
        if let Some(rounds) = entry.get_mut("rounds").and_then(Value::as_array_mut) {
            for round in rounds {
                enrich_entry(dir, round)?;
            }
        }
    }
    Ok(())
}

fn enrich_entry(dir: &Path, value: &mut Value) -> anyhow::Result<()> {
    let Ok(entry) = Entry::deserialize(&*value) else {
        return Ok(());
    };
    let Some(file) = entry
        .request_records
        .filter(|_| entry.latency_histograms.is_none())
    else {
        return Ok(());
    };
    let path = dir.join(file);
    if !path.exists() {
        return Ok(());
    }
    let records = records::read_csv(&path)?;
    let server = match &entry.result.requests.latency_histogram_us {
        Some(hex) => Some(histograms::encode(&histograms::from_server(hex)?)),
        None => None,
    };
    let encoded = Encoded {
        client: histograms::encode(&histograms::client(&records)),
        server,
    };
    if let Some(object) = value.as_object_mut() {
        object.insert("latencyHistograms".into(), json!(encoded));
        object.insert("perSecond".into(), json!(histograms::per_second(&records)?));
    }
    Ok(())
}
