//! The host's calls of the exports a component's world adds to `strategy`
//! (`job-runner`, `message-handler`, `stream-consumer`, `write-behind`,
//! `drop-gate`), one typed method of [`Runtime`] each. Apart from
//! [`super::exports`], which finds where the exports are and so is part of
//! every loaded component: these calls take the loaded component, and the
//! loaded component takes nothing from them.

use std::sync::Arc;

use super::bindings::types::{
    Confirmation, GateReconciled, Handled, ReconcileReport, SeedAnswer, StreamEntry,
};
use super::ended::Traced;
use super::engine::Runtime;
use super::loaded::Strategy;

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
                self.call_export(strategy, export, async |export, store, instance| {
                    export.$function(store, instance, $($arg),*).await
                })
                .await
                .into()
            }
        )*}
    };
}

world_calls! {
    /// Runs a job `strategy` submitted (stage 4).
    run_job(payload: &str) -> Confirmation = job_runner.run_job;
    /// Hands one pub/sub message to `strategy` (stage 5).
    handle_message(payload: &str) -> Option<Confirmation> = message_handler.handle_message;
    /// Hands one stream entry to `strategy` (stage 6).
    handle_entry(entry: &StreamEntry) -> Handled = stream_consumer.handle_entry;
    /// Asks `strategy` to undo a dead-lettered entry (stage 6).
    dead_letter(entry: &StreamEntry) -> Confirmation = stream_consumer.dead_letter;
    /// Writes a batch of write-behind entries in one transaction (stage 9).
    load_batch(entries: &[StreamEntry]) -> Result<Vec<Confirmation>, String> = write_behind.load_batch;
    /// Writes one write-behind entry alone (stage 9).
    load_entry(entry: &StreamEntry) -> Result<Confirmation, String> = write_behind.load_entry;
    /// Asks `strategy` what a dead-lettered write-behind entry's request became (stage 9).
    write_behind_dead_letter(entry: &StreamEntry) -> Confirmation = write_behind.dead_letter;
    /// Reconciles one coupon's DB rows with its Redis set (stage 9).
    reconcile(coupon_id: u64) -> Result<ReconcileReport, String> = write_behind.reconcile;
    /// Cancels a limited-drop reservation.
    cancel(coupon_id: u64, member_id: u64, idempotency_key: &str) -> Result<bool, String> = drop_gate.cancel;
    /// Seeds a limited drop's stock if it is not seeded yet.
    seed(coupon_id: u64, quantity: u32, ttl_seconds: u32) -> Result<SeedAnswer, String> = drop_gate.seed;
    /// Sets a limited drop's gate from the rows again if it disagrees with them.
    reconcile_gate(coupon_id: u64) -> Result<GateReconciled, String> = drop_gate.reconcile;
}
