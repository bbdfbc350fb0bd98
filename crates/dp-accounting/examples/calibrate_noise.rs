//! Calibrates σ for ε = 8, δ = 1e-5, q = 0.04, 90 epochs (2250 steps) under RDP and PLD.
//! Should print σ ≈ 1.4160 (RDP, as Opacus) and a smaller σ for PLD, each with ε ≤ 8.

use dp_accounting::{calibrate_noise, CalibrationOptions, DpEvent, PldConfig, RdpConfig, Result};

fn main() -> Result<()> {
    let event = |sigma| DpEvent::dp_sgd(0.04, sigma, 2250);
    let options = CalibrationOptions {
        relative_tolerance: 1e-4,
        ..CalibrationOptions::default()
    };
    let rdp = calibrate_noise(|| RdpConfig::default().build(), event, 8.0, 1e-5, options)?;
    println!(
        "rdp: sigma = {:.4}, epsilon = {:.4}",
        rdp.value, rdp.epsilon
    );
    let pld = calibrate_noise(|| PldConfig::default().build(), event, 8.0, 1e-5, options)?;
    println!(
        "pld: sigma = {:.4}, epsilon = {:.4}",
        pld.value, pld.epsilon
    );
    Ok(())
}
