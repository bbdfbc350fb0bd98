//! BandMF: DP-FTRL with a banded matrix factorization of the prefix-sum workload — the
//! strategy (its optimiser and sensitivity) and the correlated noise it adds.

mod noise;
mod strategy;
#[cfg(test)]
mod tests;

pub use noise::CorrelatedNoise;
pub use strategy::BandedToeplitz;

use dp_accounting::DpEvent;

/// The privacy event of BandMF with amplification by sampling (Choquette-Choo, Ganesh,
/// McKenna, McMahan, Rush, Thakurta & Xu, NeurIPS 2023, arXiv 2306.08153, Thm 4, as
/// jax_privacy's `amplified_bandmf_event` states it): the data cut into `bands` fixed
/// groups (b ≥ the strategy's bands), step t Poisson-samples group t mod b at rate
/// `sampling_rate`, and the noise `z_t ~ N(0, (σ·C·‖c‖_col)²)` (C the clip norm,
/// ‖c‖_col the largest column norm, 1 after normalisation) is correlated by the strategy;
/// then the run is accounted as DP-SGD with ⌈steps/b⌉ rounds of the Poisson-subsampled
/// Gaussian with noise multiplier σ. With b = 1 it is DP-SGD's event.
pub fn amplified_event(
    noise_multiplier: f64,
    steps: u64,
    bands: u64,
    sampling_rate: f64,
) -> crate::Result<DpEvent> {
    if bands == 0 {
        return Err(crate::Error::InvalidParameter {
            name: "bands",
            value: 0.0,
            reason: "must be >= 1",
        });
    }
    Ok(DpEvent::dp_sgd(
        sampling_rate,
        noise_multiplier,
        steps.div_ceil(bands),
    ))
}
