//! Shared guest code for couponlab strategies, compiled into every component.
//!
//! A strategy crate declares its method with [`strategy!`] (which implements
//! [`Strategy`] and exports the component) or implements [`Strategy`] by
//! hand and calls `couponlab_sdk::export_issuer!(MyStrategy);`. Everything it
//! needs beyond its own decisions lives here:
//!
//! - [`redis`]: commands, scripts and dedicated connections, with replies as
//!   a [`Reply`] tree;
//! - [`sql`]: transactions and autocommit statements with typed parameters
//!   and typed errors;
//! - [`outcome`]: building an [`IssueResult`], and turning capability errors
//!   into the outcome the contract gives them;
//! - [`plain_reads`]: the stage-1 flow at an isolation level, with plain
//!   reads and no explicit lock;
//! - [`optimistic`]: the version-checked attempt, once or with bounded retries;
//! - [`keys`]: the Redis key names of the seed, and the shards of a stock;
//! - [`coupon`]: the coupon's total from `coupon:total:{id}`, re-read from the
//!   database when missing;
//! - [`reserve`]: the one-EVALSHA Lua reservation, on the coupon or on the
//!   member's shard of its stock;
//! - [`confirm`]: the DB confirm step and its compensation, shared by every
//!   Redis method;
//! - [`compensate`]: what a strategy undoes when its call ended without an
//!   answer (a trap, the deadline);
//! - [`message`]: the `memberId:couponId` payload of jobs and pub/sub
//!   messages (the contract's, which the host reads too);
//! - [`process_lock`]: named locks of the serving process;
//! - [`named_lock`]: MySQL's named locks, on a session of the call's own;
//! - [`channels`]: waiting for a channel's next message, and a lease
//!   renewed while the call works;
//! - [`stream`]: what a stream consumer does with one entry;
//! - [`broker`]: the reservation published to a broker, and its settling.
//! - [`write_behind`]: the write-behind accept, batch load and reconcile;
//! - `heap`: the allocator, which starts in the initial memory (nothing to call);
//! - `panic`: every panic's message written to the lab's log (nothing to call).
//!
//! A strategy of another world (async, pub/sub, stream, gate) calls
//! [`world!`] with the world's name: that generates the world's own imports
//! and export traits in the strategy crate and reuses the sdk's bindings for
//! everything the worlds share, so every helper here works in every world.
//! [`stream_consumer!`] and [`write_behind_loader!`] implement the exports of
//! the stream and write-behind worlds that every method of those worlds
//! answers the same way.

pub mod bindings {
    wit_bindgen::generate!({
        world: "issuer",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_issuer",
        default_bindings_module: "couponlab_sdk::bindings",
    });
}

pub mod broker;
pub mod channels;
pub mod clock;
pub mod compensate;
pub mod confirm;
pub mod coupon;
mod heap;
pub mod keys;
pub mod log;
pub mod named_lock;
pub mod optimistic;
pub mod outcome;
mod panic;
pub mod plain_reads;
pub mod process_lock;
pub mod redis;
pub mod reply;
pub mod reserve;
pub mod sql;
pub mod stream;
pub mod write_behind;

pub use couponlab_contract::message;

pub use bindings::couponlab::strategy::types::{
    Claim, Compensation, Confirmation, Descriptor, Disposition, EngineClaims, Handled,
    IssueRequest, IssueResult, Outcome, ResultLabel, StreamEntry,
};
pub use bindings::export_issuer;
pub use bindings::exports::couponlab::strategy::strategy::Guest as Strategy;
pub use outcome::{Step, settle, unanswered_write};
pub use reply::Reply;

/// Re-exported for [`world!`], so strategy crates need no dependency of their own.
pub use wit_bindgen;

/// Generates, in the calling strategy crate, the bindings of one world
/// besides `issuer`: `couponlab_sdk::world!("stream-issuer");` gives the
/// `exports::couponlab::strategy::...::Guest` traits to implement, any
/// import the world adds (`couponlab::strategy::jobs`, `...::permits`) and a
/// local `export!` macro. The imports every world shares map to the sdk's.
///
/// A crate one level deeper (the fixtures under `testing/`) names the path
/// of `wit/` from its own directory: `world!("async-issuer", "../../../wit")`.
#[macro_export]
macro_rules! world {
    ($world:literal) => {
        $crate::world!($world, "../../wit");
    };
    ($world:literal, $wit:literal) => {
        $crate::wit_bindgen::generate!({
            world: $world,
            path: $wit,
            runtime_path: "::couponlab_sdk::wit_bindgen::rt",
            with: {
                "couponlab:strategy/redis@0.2.0": ::couponlab_sdk::bindings::couponlab::strategy::redis,
                "couponlab:strategy/sql@0.2.0": ::couponlab_sdk::bindings::couponlab::strategy::sql,
                "couponlab:strategy/clock@0.2.0": ::couponlab_sdk::bindings::couponlab::strategy::clock,
                "couponlab:strategy/log@0.2.0": ::couponlab_sdk::bindings::couponlab::strategy::log,
                "couponlab:strategy/process-lock@0.2.0": ::couponlab_sdk::bindings::couponlab::strategy::process_lock,
                "couponlab:strategy/types@0.2.0": ::couponlab_sdk::bindings::couponlab::strategy::types,
            },
        });
    };
}

/// Declares a strategy: the unit struct, its `describe()` and the bodies of
/// `issue` and `compensate`, and exports the component.
///
/// Every strategy answers `describe()` with a method name and a summary and
/// forwards `issue` and `compensate` to its own code; only those pieces
/// differ from crate to crate, so only they are written out:
///
/// ```ignore
/// couponlab_sdk::strategy! {
///     struct RedisLua { method: "REDIS_LUA", claims: [Total, Member, Acked], summary: "one Lua script reserves, then the DB confirm step", reservation_set: true }
///     fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
///     fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
/// }
/// ```
///
/// `claims` follows the method: what it promises, of [`Claim`]'s `Total`,
/// `Member` and `Acked` (`[]` promises nothing). The host's canary checks
/// each claim before the component serves, the load runner after every run.
///
/// After `method`, `claims` and `summary`, the descriptor's other facts are optional:
/// `reservation_set: true` for a method that reserves in
/// `coupon:issued:{id}` (false when left out), and `result_labels: ["label"
/// => "resultField", ..]` for labels the result totals (none when left out),
/// and `engine_claims: [{ engine: "galera", claims: [Member, Acked], why:
/// "..." }]` for an engine on which the method promises other claims than
/// `claims` (the entry for the lab's engine is in force there, and the
/// canary and the load runner judge by it), each with the reason a user
/// reads.
///
/// The bodies are blocks over the `IssueRequest` parameter named in the
/// parentheses (`_request` when unused), returning `IssueResult` and
/// `Compensation`. A method whose failed call leaves nothing to undo (its
/// writes are one transaction, rolled back) leaves `fn compensate` out: it
/// answers [`compensate::nothing`]. Without a trait the struct implements [`Strategy`] of the
/// `issuer` world and the component is exported with [`export_issuer!`]. A
/// crate of another world names the trait its [`world!`] generated,
/// `struct RedisStream: strategy::Guest { .. }`, and the macro exports with
/// that world's `export!`, so the world's other export traits must be
/// implemented in the crate as well.
#[macro_export]
macro_rules! strategy {
    (
        struct $ty:ident { $($descriptor:tt)* }
        $(#[$issue_attr:meta])* fn issue($request:ident) $issue:block
        $(#[$compensate_attr:meta])* fn compensate($failed:ident) $compensate:block
    ) => {
        $crate::strategy!(@impl $crate::Strategy, $ty, { $($descriptor)* },
            $(#[$issue_attr])* $request $issue, $(#[$compensate_attr])* $failed $compensate);
        $crate::export_issuer!($ty);
    };
    (
        struct $ty:ident: $guest:path { $($descriptor:tt)* }
        $(#[$issue_attr:meta])* fn issue($request:ident) $issue:block
        $(#[$compensate_attr:meta])* fn compensate($failed:ident) $compensate:block
    ) => {
        $crate::strategy!(@impl $guest, $ty, { $($descriptor)* },
            $(#[$issue_attr])* $request $issue, $(#[$compensate_attr])* $failed $compensate);
        export!($ty);
    };
    // Without `compensate`: a failed call left nothing to undo.
    (
        struct $ty:ident $(: $guest:path)? { $($descriptor:tt)* }
        $(#[$issue_attr:meta])* fn issue($request:ident) $issue:block
    ) => {
        $crate::strategy! {
            struct $ty $(: $guest)? { $($descriptor)* }
            $(#[$issue_attr])* fn issue($request) $issue
            fn compensate(_request) { $crate::compensate::nothing() }
        }
    };
    (
        @impl $guest:path, $ty:ident,
        {
            method: $method:expr, claims: [$($claim:ident),* $(,)?], summary: $summary:expr
            $(, reservation_set: $reservation_set:expr)?
            $(, result_labels: [$($label:expr => $field:expr),* $(,)?])?
            $(, engine_claims: [$({
                engine: $engine:expr, claims: [$($engine_claim:ident),* $(,)?], why: $why:expr $(,)?
            }),* $(,)?])?
            $(,)?
        },
        $(#[$issue_attr:meta])* $request:ident $issue:block,
        $(#[$compensate_attr:meta])* $failed:ident $compensate:block
    ) => {
        struct $ty;

        impl $guest for $ty {
            fn describe() -> $crate::Descriptor {
                $crate::Descriptor {
                    method: ::std::convert::Into::into($method),
                    claims: ::std::vec![$($crate::Claim::$claim),*],
                    summary: ::std::convert::Into::into($summary),
                    reservation_set: $crate::strategy!(@or_false $($reservation_set)?),
                    result_labels: ::std::vec![$($($crate::ResultLabel {
                        label: ::std::convert::Into::into($label),
                        field: ::std::convert::Into::into($field),
                    }),*)?],
                    engine_claims: ::std::vec![$($($crate::EngineClaims {
                        engine: ::std::convert::Into::into($engine),
                        claims: ::std::vec![$($crate::Claim::$engine_claim),*],
                        why: ::std::convert::Into::into($why),
                    }),*)?],
                }
            }

            $(#[$issue_attr])*
            fn issue($request: $crate::IssueRequest) -> $crate::IssueResult $issue

            $(#[$compensate_attr])*
            fn compensate($failed: $crate::IssueRequest) -> $crate::Compensation $compensate
        }
    };
    (@or_false) => { false };
    (@or_false $value:expr) => { $value };
}

/// Builds a list of command arguments from anything printable:
/// `args![key, member_id]`.
#[macro_export]
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        ::std::vec![$(::std::string::ToString::to_string(&$arg)),*]
    };
}

/// Builds a list of SQL parameters: `params![coupon_id, member_id]`.
#[macro_export]
macro_rules! params {
    ($($param:expr),* $(,)?) => {
        ::std::vec![$($crate::sql::ToSql::to_sql(&$param)),*]
    };
}
