//! The exported interfaces of `wit/strategy.wit` as the host calls them:
//! each function's index in a component found once, when the component is
//! loaded, and each call looking up and type-checking only the function it
//! calls. (bindgen's `GuestIndices::load`, and the `*Pre` types built on
//! it, type-check every function of the interface on every instance: three
//! checks of nested records for one `issue`.) Every call goes through
//! `Runtime::call_export` ([`super::call`]): a fresh store and instance, the
//! deadline and the clean-up of every call; the world exports' calls are
//! [`super::world_calls`]'.

use wasmtime::Store;
use wasmtime::component::{Component, ComponentExportIndex, Instance};

use super::bindings::types::{
    Compensation, Confirmation, Descriptor, GateReconciled, Handled, IssueRequest, IssueResult,
    ReconcileReport, SeedAnswer, StreamEntry,
};

/// An exported interface the host calls, by its name in `wit/strategy.wit`.
pub(super) trait Export {
    const NAME: &'static str;
}

/// The full name (`couponlab:strategy/<name>@<version>`) under which
/// `component` exports the interface `name`, if it does.
fn exported_interface(component: &Component, name: &str) -> Option<ComponentExportIndex> {
    let prefix = format!("couponlab:strategy/{name}@");
    let engine = component.engine();
    let full = component
        .component_type()
        .exports(engine)
        .map(|(export, _)| export)
        .find(|export| export.starts_with(&prefix))?
        .to_string();
    component.get_export_index(None, &full)
}

/// The index of `function` inside the exported interface `interface`.
fn exported_function(
    component: &Component,
    interface: &ComponentExportIndex,
    interface_name: &str,
    function: &str,
) -> anyhow::Result<ComponentExportIndex> {
    component
        .get_export_index(Some(interface), function)
        .ok_or_else(|| {
            anyhow::anyhow!("its `{interface_name}` export has no function `{function}`")
        })
}

/// For each interface: a struct of its functions' indices, found in a
/// component with `find`, all type-checked against the host's bindings
/// with `check`, and one method per function that calls it in an instance.
macro_rules! interfaces {
    ($(
        $(#[$doc:meta])*
        $interface:ident $name:literal {$(
            $function:ident $wit_name:literal ($($arg:ident: $arg_type:ty),*) -> $answer:ty;
        )*}
    )*) => {$(
        $(#[$doc])*
        pub struct $interface {
            $($function: ComponentExportIndex,)*
        }

        impl Export for $interface {
            const NAME: &'static str = $name;
        }

        impl $interface {
            /// Its functions' indices in `component`; `None` when the
            /// component does not export the interface.
            pub(super) fn find(component: &Component) -> anyhow::Result<Option<Self>> {
                let Some(interface) = exported_interface(component, $name) else {
                    return Ok(None);
                };
                Ok(Some(Self {$(
                    $function: exported_function(component, &interface, $name, $wit_name)?,
                )*}))
            }

            /// Type-checks every function against the host's bindings,
            /// in an instance of the component: once, when it is loaded.
            pub(super) fn check<T: Send>(
                &self,
                store: &mut Store<T>,
                instance: &Instance,
            ) -> wasmtime::Result<()> {
                $(instance.get_typed_func::<($($arg_type,)*), ($answer,)>(
                    &mut *store,
                    &self.$function,
                )?;)*
                Ok(())
            }

            $(
            pub(super) async fn $function<T: Send>(
                &self,
                store: &mut Store<T>,
                instance: &Instance,
                $($arg: $arg_type),*
            ) -> wasmtime::Result<$answer> {
                let function = instance.get_typed_func::<($($arg_type,)*), ($answer,)>(
                    &mut *store,
                    &self.$function,
                )?;
                let (answer,) = function.call_async(&mut *store, ($($arg,)*)).await?;
                Ok(answer)
            }
            )*
        }
    )*};
}

interfaces! {
    /// The export every strategy has.
    StrategyExport "strategy" {
        describe "describe"() -> Descriptor;
        issue "issue"(request: &IssueRequest) -> IssueResult;
        compensate "compensate"(request: &IssueRequest) -> Compensation;
    }
    /// The async world's job runner (stage 4).
    JobRunnerExport "job-runner" {
        run_job "run-job"(payload: &str) -> Confirmation;
    }
    /// The pub/sub world's message handler (stage 5).
    MessageHandlerExport "message-handler" {
        handle_message "handle-message"(payload: &str) -> Option<Confirmation>;
    }
    /// The stream world's consumer (stage 6), also the broker world's.
    StreamConsumerExport "stream-consumer" {
        handle_entry "handle-entry"(entry: &StreamEntry) -> Handled;
        dead_letter "dead-letter"(entry: &StreamEntry) -> Confirmation;
    }
    /// The write-behind world's loader and reconcile (stage 9).
    WriteBehindExport "write-behind" {
        load_batch "load-batch"(entries: &[StreamEntry]) -> Result<Vec<Confirmation>, String>;
        load_entry "load-entry"(entry: &StreamEntry) -> Result<Confirmation, String>;
        dead_letter "dead-letter"(entry: &StreamEntry) -> Confirmation;
        reconcile "reconcile"(coupon_id: u64) -> Result<ReconcileReport, String>;
    }
    /// The limited drop's cancel and seed.
    DropGateExport "drop-gate" {
        cancel "cancel"(coupon_id: u64, member_id: u64, idempotency_key: &str) -> Result<bool, String>;
        seed "seed"(coupon_id: u64, quantity: u32, ttl_seconds: u32) -> Result<SeedAnswer, String>;
        reconcile "reconcile"(coupon_id: u64) -> Result<GateReconciled, String>;
    }
}
