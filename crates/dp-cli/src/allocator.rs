//! The global allocator: mimalloc, told to keep what it frees.
//!
//! With glibc every large intermediate of a DP step is returned to the OS and
//! page-faulted in again; mimalloc reuses freed blocks, but by default (v3) still purges
//! freed memory after 1 s, so a step longer than that faults its tensors in again: the
//! transformer's private step spent a fifth of its time zeroing fresh pages, 91k page
//! faults in two steps against 1.5k with purging off (docs/training.md). A training
//! process keeps its peak working set anyway.

use libmimalloc_sys::{mi_option_get, mi_option_set, mi_option_t};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (include/mimalloc.h, v2 and v3),
/// which libmimalloc-sys does not name.
const PURGE_DELAY: mi_option_t = 15;

/// Turns purging off (a delay of −1 ms); call first in `main`.
pub fn keep_freed_memory() {
    // SAFETY: mi_option_set only stores the value; the option exists in both versions.
    #[allow(unsafe_code)]
    unsafe {
        mi_option_set(PURGE_DELAY, -1)
    }
}

/// The purge delay now in force, in ms.
#[cfg_attr(not(test), allow(dead_code))]
pub fn purge_delay() -> i64 {
    // SAFETY: a read of an option value.
    #[allow(unsafe_code)]
    let delay = unsafe { mi_option_get(PURGE_DELAY) };
    #[allow(clippy::useless_conversion)] // c_long is i32 on Windows
    i64::from(delay)
}

#[cfg(test)]
mod tests {
    /// Option 15 is the purge delay: its documented default (1000 ms in v3, 10 in v2)
    /// before, −1 after.
    #[test]
    fn the_purge_delay_option_is_the_one_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert!([10, 1000].contains(&super::purge_delay()));
        }
        super::keep_freed_memory();
        assert_eq!(super::purge_delay(), -1);
    }
}
