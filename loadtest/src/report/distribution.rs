//! results.json as the report reads it, and what it keeps of each run
//! beyond its figures: the latency histograms (client and server) and the
//! run second by second, taken from the request records the run wrote
//! beside the report (and the times of its confirmed 202s), so the charts
//! are redrawn, and runs compared, from results.json alone.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use couponlab_contract::results::CouponResult;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::histograms::{self, Confirmed, Encoded, Second};
use crate::k6;
use crate::records;
use crate::spread::Spread;
use crate::verification::Verification;

/// A method's entry in results.json, as the run wrote it: what k6 and the
/// lab said, verbatim, and what the runner made of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The coupon the run issued.
    pub coupon_id: u64,
    pub k6: k6::Figures,
    pub result: CouponResult,
    #[serde(default)]
    pub verification: Option<Verification>,
    /// One request's trace, as the lab's traces route answered it.
    #[serde(default)]
    pub example_trace: Option<Value>,
    /// Over rounds: each figure's median and range, by its heading.
    #[serde(default)]
    pub spread: BTreeMap<String, Spread<f64>>,
    /// The file of its request records, beside the report.
    #[serde(default)]
    pub request_records: Option<String>,
    #[serde(default)]
    pub latency_histograms: Option<Encoded>,
    #[serde(default)]
    pub per_second: Vec<Second>,
    /// The 202s confirmed as issued, for the lag second by second.
    #[serde(default)]
    pub confirmations: Vec<Confirmed>,
    /// The faults that fired during the run (`firedAtMs` from its start).
    #[serde(default)]
    pub faults: Vec<Fired>,
    /// Over several rounds, every round's entry.
    #[serde(default)]
    pub rounds: Vec<Value>,
}

/// A fault that fired, where the run's time axis marks it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fired {
    pub fault: String,
    pub fired_at_ms: f64,
}

/// A run's results.json, as the report wrote it: each method's entry kept
/// as written, to be written again, and as the report reads it.
pub struct Results {
    pub title: String,
    pub description: String,
    pub provenance: Value,
    pub methods: BTreeMap<String, Value>,
    pub entries: BTreeMap<String, Entry>,
}

/// results.json's own fields.
#[derive(Deserialize)]
struct Written {
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    provenance: Value,
    methods: BTreeMap<String, Value>,
}

impl Results {
    /// The results.json in `dir`; an entry of another shape is refused by
    /// its method and the field that differs.
    pub fn read(dir: &Path) -> anyhow::Result<Results> {
        let path = dir.join("results.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("no results.json in {}", dir.display()))?;
        let written: Written = serde_json::from_str(&text)
            .with_context(|| format!("unreadable {}", path.display()))?;
        let entries = written
            .methods
            .iter()
            .map(|(method, value)| Ok((method.clone(), Entry::read(method, value)?)))
            .collect::<anyhow::Result<_>>()
            .with_context(|| format!("in {}", path.display()))?;
        Ok(Results {
            title: written.title,
            description: written.description,
            provenance: written.provenance,
            methods: written.methods,
            entries,
        })
    }

    /// `method`'s entry.
    pub fn method(&self, method: &str) -> anyhow::Result<&Entry> {
        self.entries
            .get(method)
            .with_context(|| format!("results.json has no {method}"))
    }
}

impl Entry {
    /// `method`'s entry; one of another shape is refused by the name of the
    /// field that differs.
    pub fn read(method: &str, value: &Value) -> anyhow::Result<Entry> {
        Entry::deserialize(value).with_context(|| format!("results.json's {method} is unreadable"))
    }
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
    let entry = Entry::read("a run", value)?;
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
        let seconds = histograms::per_second(&records, &entry.confirmations)?;
        object.insert("perSecond".into(), json!(seconds));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::report::tests::result;

    #[test]
    fn the_lab_s_result_reads_as_the_contract_types_it() {
        let served = result(103, json!({ "ISSUED": 100, "SOLD_OUT": 400 }));
        let read = <CouponResult>::deserialize(&served).unwrap();
        assert_eq!(read.requests.answered("SOLD_OUT"), 400);
        // A renamed field fails the read by its name.
        let mut renamed = served.clone();
        let requests = renamed["requests"].as_object_mut().unwrap();
        let by_outcome = requests.remove("byOutcome").unwrap();
        requests.insert("outcomes".into(), by_outcome);
        let refused = <CouponResult>::deserialize(&renamed)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("byOutcome"), "{refused}");
    }
}
