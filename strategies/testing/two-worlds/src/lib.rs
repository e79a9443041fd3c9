//! Test fixture TEST_TWO_WORLDS: exports the interfaces of every world at
//! once (it targets the host's own `lab-host` world), so the host cannot
//! tell which consumer would serve it and must refuse to load it. Nothing
//! here is ever called.

use couponlab_sdk::{Confirmation, Handled, IssueResult, StreamEntry};

couponlab_sdk::world!("lab-host", "../../../wit");

use exports::couponlab::strategy::{
    drop_gate, job_runner, message_handler, strategy, stream_consumer, write_behind,
};

couponlab_sdk::strategy! {
    struct TwoWorlds: strategy::Guest { method: "TEST_TWO_WORLDS", claims: [], summary: "exports the interfaces of every world (must be refused)" }
    fn issue(_request) { IssueResult::issued() }
}

const NEVER: &str = "the host refuses this component before calling it";

impl job_runner::Guest for TwoWorlds {
    fn run_job(_payload: String) -> Confirmation {
        unreachable!("{NEVER}")
    }
}

impl message_handler::Guest for TwoWorlds {
    fn handle_message(_payload: String) -> Option<Confirmation> {
        unreachable!("{NEVER}")
    }
}

impl stream_consumer::Guest for TwoWorlds {
    fn handle_entry(_entry: StreamEntry) -> Handled {
        unreachable!("{NEVER}")
    }

    fn dead_letter(_entry: StreamEntry) -> Confirmation {
        unreachable!("{NEVER}")
    }
}

impl write_behind::Guest for TwoWorlds {
    fn load_batch(_entries: Vec<StreamEntry>) -> Result<Vec<Confirmation>, String> {
        unreachable!("{NEVER}")
    }

    fn load_entry(_entry: StreamEntry) -> Result<Confirmation, String> {
        unreachable!("{NEVER}")
    }

    fn dead_letter(_entry: StreamEntry) -> Confirmation {
        unreachable!("{NEVER}")
    }

    fn reconcile(_coupon_id: u64) -> Result<write_behind::ReconcileReport, String> {
        unreachable!("{NEVER}")
    }
}

impl drop_gate::Guest for TwoWorlds {
    fn cancel(_coupon_id: u64, _member_id: u64, _idempotency_key: String) -> Result<bool, String> {
        unreachable!("{NEVER}")
    }

    fn seed(
        _coupon_id: u64,
        _quantity: u32,
        _ttl_seconds: u32,
    ) -> Result<drop_gate::SeedAnswer, String> {
        unreachable!("{NEVER}")
    }

    fn reconcile(_coupon_id: u64) -> Result<drop_gate::GateReconciled, String> {
        unreachable!("{NEVER}")
    }
}
