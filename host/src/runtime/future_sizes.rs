//! How large a host call's future is. wasmtime moves a host call's future
//! by value, into a box of its own and through the call's wrappers, so
//! every byte of it is copied several times a call; each capability's
//! `call_futures` test keeps its calls' futures under [`LIMIT`].

/// The most a host call's future may hold.
pub const LIMIT: usize = 1024;

/// The size of the future `call` answers, without making one.
pub fn future_size<S: 'static, F: Future>(_: impl FnOnce(&'static mut S) -> F) -> usize {
    std::mem::size_of::<F>()
}

/// Prints every call's size, then fails on any over [`LIMIT`].
pub fn assert_small(sizes: &[(&str, usize)]) {
    for (call, size) in sizes {
        println!("{call}: {size} bytes");
    }
    for (call, size) in sizes {
        assert!(
            *size <= LIMIT,
            "{call}'s future is {size} bytes, over {LIMIT}: wasmtime copies it several times a call"
        );
    }
}
