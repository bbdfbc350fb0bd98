//! The machine's practical peak for the DP-SGD bench's "fraction of peak": the throughput
//! of a large single-precision GEMM (Candle's CPU matmul, the `gemm` crate's AVX-512/FMA
//! kernels, all threads), 2n³ operations per product, median of five. A GEMM this size
//! runs near the FMA units' limit, so it stands for what the silicon delivers to dense
//! f32 arithmetic here; the theoretical figure (cores × clock × FMA width × 2) is higher
//! by the GEMM's own losses.

use std::time::Instant;

use anyhow::Result;
use candle_core::{Device, Tensor};

/// GFLOP/s of an `n`×`n` by `n`×`n` f32 matmul on the CPU, median of five.
pub fn gemm_gflops(n: usize) -> Result<f64> {
    let a = Tensor::ones((n, n), candle_core::DType::F32, &Device::Cpu)?;
    let b = (&a * 0.5)?;
    a.matmul(&b)?; // warm up
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            a.matmul(&b).map(|_| start.elapsed().as_secs_f64())
        })
        .collect::<candle_core::Result<_>>()?;
    times.sort_by(f64::total_cmp);
    Ok(2.0 * (n as f64).powi(3) / times[2] / 1e9)
}

/// Achieved GFLOP/s of the private step (the network's forward and DP backward per
/// sample, `Flops`) against the machine's practical peak ([`gemm_gflops`]); returns the
/// fraction.
pub fn report_flops(samples_per_s: f64, flops: dp_models::nn::Flops) -> Result<f64> {
    let achieved = samples_per_s * flops.total() as f64 / 1e9;
    let peak = gemm_gflops(2048)?;
    println!(
        "arithmetic: {:.2} MFLOP/sample (forward {:.2}, DP backward {:.2}); private step {achieved:.1} GFLOP/s = {:.0}% of the GEMM peak {peak:.1} GFLOP/s (2048³ f32 matmul, same threads)",
        flops.total() as f64 / 1e6,
        flops.forward as f64 / 1e6,
        flops.backward as f64 / 1e6,
        100.0 * achieved / peak
    );
    Ok(achieved / peak)
}
