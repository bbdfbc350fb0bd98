//! BandMF's strategy for a 2,000-step run: the optimised banded Toeplitz factorisations of
//! the prefix-sum workload against independent noise (one band, DP-SGD's), their error
//! per unit of noise and their sensitivity when an example takes part every b steps.
//!
//! `cargo run --release -p dp-mechanisms --example band_mf_strategy`

use dp_mechanisms::band_mf::BandedToeplitz;

fn main() -> dp_mechanisms::Result<()> {
    let n = 2000;
    let independent = BandedToeplitz::new(vec![1.0])?.prefix_loss(n).sqrt();
    println!(
        "prefix sums over {n} steps; RMSE per unit noise at sensitivity 1 (one participation)"
    );
    println!(
        "{:>6} {:>10} {:>12} {:>26}",
        "bands", "RMSE", "vs 1 band", "first coefficients"
    );
    for bands in [1, 2, 4, 8, 16, 32, 64] {
        let strategy = BandedToeplitz::optimize(n, bands, 500)?;
        let rmse = strategy.prefix_loss(n).sqrt();
        // Participation every b steps: the columns are orthogonal, sensitivity² = k·‖c‖².
        let k = n / bands;
        let sens2 = strategy.sensitivity_squared(n, bands, k);
        assert!((sens2 - k as f64).abs() < 1e-9 * k as f64);
        let head: Vec<String> = strategy
            .coefs()
            .iter()
            .take(3)
            .map(|c| format!("{c:.3}"))
            .collect();
        println!(
            "{bands:>6} {rmse:>10.2} {:>11.3}x {:>26}",
            rmse / independent,
            head.join(", ")
        );
    }
    Ok(())
}
