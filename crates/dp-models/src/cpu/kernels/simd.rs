//! Runs the fused tier's per-sample loops on the widest vector unit the CPU reports.
//!
//! The kernels are plain loops written to auto-vectorise. Compiled for the baseline
//! target (SSE2 on x86-64, the default of every Rust build) they run four lanes wide.
//! [`vectorized`] runs a closure inside a function compiled with AVX2 and FMA enabled
//! when the CPU has them, so the closure and the `#[inline(always)]` kernels it calls are
//! compiled eight lanes wide (the `pulp`/`gemm` way of multiversioning, without a
//! `-C target-cpu` that would make the binary fail on older CPUs).
//!
//! Results do not depend on the level: Rust never contracts `a·b + c` into a fused
//! multiply-add, and the kernels fix their summation order (split accumulators), so the
//! same instructions' lanes compute the same values (tested bit for bit).

#[cfg(test)]
use std::sync::atomic::{AtomicBool, Ordering};

/// Tests set this to run [`vectorized`] closures at the baseline and compare the results.
#[cfg(test)]
pub(crate) static FORCE_BASELINE: AtomicBool = AtomicBool::new(false);

/// Whether this CPU has AVX2 and FMA (x86-64-v3); `std` caches the detection.
#[inline(always)]
fn has_avx2() -> bool {
    #[cfg(test)]
    if FORCE_BASELINE.load(Ordering::SeqCst) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Runs `f` compiled for the widest vector unit this CPU has. Mark the closure and the
/// kernels it calls `#[inline(always)]`: code that is not inlined into it keeps the
/// baseline.
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU reports AVX2 and FMA, the features `avx2` is compiled with.
        #[allow(unsafe_code)]
        return unsafe { avx2(f) };
    }
    f()
}

/// `f`, compiled with AVX2 and FMA enabled (the inlined closure inherits them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}
