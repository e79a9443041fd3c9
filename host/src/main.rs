//! The `couponlab` binary: the library's [`couponlab::main`] with the
//! allocator.

/// Every call allocates its store, its instance's bookkeeping and its
/// replies; mimalloc's thread-local free lists serve that churn from both
/// cores without the contention of glibc's arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    couponlab::main()
}
