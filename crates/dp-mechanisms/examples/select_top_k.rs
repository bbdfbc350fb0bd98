//! Selects the 2 largest of 6 scores privately, releases them with Gaussian noise and
//! accounts for both. Should print two indices (nearly uniform at this small ε, with 3
//! and 1 the most likely), their noisy values, and ε ≈ 1.81 at δ = 1e-5.

use dp_accounting::{Accountant, RdpConfig};
use dp_mechanisms::{BudgetSplit, GaussianMechanism, Mechanism, NoiseSource, TopK, TopKMethod};

fn main() -> dp_mechanisms::Result<()> {
    let mut noise = NoiseSource::os_seeded()?;
    let scores = [0.1, 2.0, 0.05, 3.0, 1.5, 0.2];
    let top = TopK::new(
        1.0,
        1.0,
        2,
        false,
        TopKMethod::OneShotGumbel,
        BudgetSplit::Basic,
    )?;
    let chosen = top.select(&scores, &mut noise)?;
    let gaussian = GaussianMechanism::from_epsilon_delta_analytic(1.0, 1.0, 1e-6)?;
    let released: Vec<f64> = chosen
        .iter()
        .map(|&i| gaussian.release(scores[i], &mut noise))
        .collect();
    let mut ledger = RdpConfig::default().build()?;
    ledger.compose(&top.event(), 1)?;
    ledger.compose(&gaussian.event(), 1)?;
    println!(
        "{chosen:?} -> {released:?}, epsilon = {:.3}",
        ledger.epsilon(1e-5)?
    );
    Ok(())
}
