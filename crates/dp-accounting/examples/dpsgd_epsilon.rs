//! ε of DP-SGD on MNIST (q = 256/60000, σ = 1.1, 60 epochs, δ = 1e-5) under every
//! accountant. Should print RDP ≈ 2.59, classic RDP ≈ 3.0, PLD ≈ 2.3, GDP ≈ 2.3.

use dp_accounting::{Accountant, Conversion, DpEvent, GdpConfig, PldConfig, RdpConfig, Result};

fn main() -> Result<()> {
    let event = DpEvent::dp_sgd(256.0 / 60000.0, 1.1, 14062);
    let mut accountants: Vec<Box<dyn Accountant>> = vec![
        Box::new(RdpConfig::default().build()?),
        Box::new(
            RdpConfig {
                conversion: Conversion::Classic,
                ..RdpConfig::default()
            }
            .build()?,
        ),
        Box::new(PldConfig::default().build()?),
        Box::new(GdpConfig::default().build()?),
    ];
    for accountant in &mut accountants {
        accountant.compose(&event, 1)?;
        let report = accountant.epsilon_report(1e-5)?;
        println!(
            "{:<12} epsilon = {:.6} order = {:?}",
            report.accountant, report.epsilon, report.order
        );
    }
    Ok(())
}
