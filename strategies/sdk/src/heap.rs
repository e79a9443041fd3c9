//! The components' allocator: dlmalloc, as std's own on
//! `wasm32-unknown-unknown`, taking its first memory from the free end of
//! the initial memory (`__heap_base` to `__heap_end`, sized by the linker:
//! `.cargo/config.toml`) and growing the memory only past it.
//!
//! std's takes every byte with `memory.grow`, so every call (a fresh
//! instance) grew its memory for its first allocation (the panic hook's)
//! and dirtied a page past the initial memory, which the pool's reset of
//! the slot then zeroed, and whose protection it changed back.

#[global_allocator]
static HEAP: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
