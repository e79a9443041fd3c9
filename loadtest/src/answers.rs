//! The lab's answers the runner reads, typed: a field renamed on the lab's
//! side fails the read by its name instead of reading as nothing. A
//! coupon's result is the contract's (`couponlab_contract::results`).

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use crate::api::Api;

/// `GET /lab/strategies`, as far as the runner reads it.
#[derive(Deserialize)]
pub struct Strategies {
    pub strategies: Vec<Served>,
    /// The database the lab's components run on, as it names it.
    pub engine: Value,
}

/// A method the lab serves, and what its component claims.
#[derive(Deserialize)]
pub struct Served {
    pub method: String,
    /// The claims in force on the engine the lab runs on (its descriptor's
    /// entry for that engine, else its claims), as that lab's host says:
    /// a run is verified against what the method promises there.
    pub claims: Vec<String>,
}

impl Strategies {
    pub fn read(api: &Api) -> anyhow::Result<Strategies> {
        read(api.get("/lab/strategies")?, "GET /lab/strategies")
    }
}

/// `value` as `T`, or an error naming the field that differs.
pub fn read<T: for<'de> Deserialize<'de>>(value: Value, what: &str) -> anyhow::Result<T> {
    T::deserialize(value).with_context(|| format!("{what} answered an unexpected shape"))
}

/// `POST /lab/members`'s answer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Members {
    pub first_id: u64,
}

/// `POST /lab/coupons`'s answer.
#[derive(Deserialize)]
pub struct Coupon {
    pub id: u64,
}

/// `GET /lab/coupons/{id}/traces`'s answer: the traces stay as the lab
/// wrote them, for results.json.
#[derive(Deserialize)]
pub struct TraceList {
    pub traces: Vec<Value>,
}
