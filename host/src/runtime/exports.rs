//! The typed calls of each world's exports, one line each, all made
//! through [`Runtime::call_export`](super::call): a fresh store and
//! instance, the deadline and the clean-up of every call.

use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::Instance;

use super::bindings::types::{Confirmation, Handled, ReconcileReport, SeedAnswer, StreamEntry};
use super::bindings::{
    drop_gate, job_runner, message_handler, strategy, stream_consumer, write_behind,
};
use super::ended::Traced;
use super::engine::Runtime;
use super::loaded::Strategy;
use super::store::HostState;

/// The indices of one exported interface, which load its typed guest.
pub(super) trait Export {
    type Guest;
    /// The interface's name in `wit/strategy.wit`.
    const NAME: &'static str;
    fn load(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest>;
}

macro_rules! exports {
    ($($interface:ident $name:literal),* $(,)?) => {$(
        impl Export for $interface::GuestIndices {
            type Guest = $interface::Guest;
            const NAME: &'static str = $name;
            fn load(
                &self,
                store: &mut Store<HostState>,
                instance: &Instance,
            ) -> wasmtime::Result<Self::Guest> {
                $interface::GuestIndices::load(self, store, instance)
            }
        }
    )*};
}

exports! {
    strategy "strategy",
    job_runner "job-runner",
    message_handler "message-handler",
    stream_consumer "stream-consumer",
    write_behind "write-behind",
    drop_gate "drop-gate",
}

/// The host's calls of the world exports, one line each: the name of the
/// call, its arguments and answer, the world accessor that finds the
/// export, and the export's function.
macro_rules! world_calls {
    ($(
        $(#[$doc:meta])*
        $name:ident($($arg:ident: $type:ty),*) -> $answer:ty = $export:ident.$function:ident;
    )*) => {
        impl Runtime {$(
            $(#[$doc])*
            pub async fn $name(
                &self,
                strategy: &Arc<Strategy>,
                $($arg: $type),*
            ) -> Traced<$answer> {
                let export = strategy.world.$export();
                self.call_export(strategy, export, async |guest, store| {
                    guest.$function(store, $($arg),*).await
                })
                .await
                .into()
            }
        )*}
    };
}

world_calls! {
    /// Runs a job `strategy` submitted (stage 4).
    run_job(payload: &str) -> Confirmation = job_runner.call_run_job;
    /// Hands one pub/sub message to `strategy` (stage 5).
    handle_message(payload: &str) -> Option<Confirmation> = message_handler.call_handle_message;
    /// Hands one stream entry to `strategy` (stage 6).
    handle_entry(entry: &StreamEntry) -> Handled = stream_consumer.call_handle_entry;
    /// Asks `strategy` to undo a dead-lettered entry (stage 6).
    dead_letter(entry: &StreamEntry) -> Confirmation = stream_consumer.call_dead_letter;
    /// Writes a batch of write-behind entries in one transaction (stage 9).
    load_batch(entries: &[StreamEntry]) -> Result<Vec<Confirmation>, String> = write_behind.call_load_batch;
    /// Writes one write-behind entry alone (stage 9).
    load_entry(entry: &StreamEntry) -> Result<Confirmation, String> = write_behind.call_load_entry;
    /// Asks `strategy` what a dead-lettered write-behind entry's request became (stage 9).
    write_behind_dead_letter(entry: &StreamEntry) -> Confirmation = write_behind.call_dead_letter;
    /// Reconciles one coupon's DB rows with its Redis set (stage 9).
    reconcile(coupon_id: u64) -> Result<ReconcileReport, String> = write_behind.call_reconcile;
    /// Cancels a limited-drop reservation.
    cancel(coupon_id: u64, member_id: u64, idempotency_key: &str) -> Result<bool, String> = drop_gate.call_cancel;
    /// Seeds a limited drop's stock if it is not seeded yet.
    seed(coupon_id: u64, quantity: u32, ttl_seconds: u32) -> Result<SeedAnswer, String> = drop_gate.call_seed;
}
