//! Accounting tables: ε of the moments accountant, the GDP CLT (Poisson and uniform), μ,
//! σ̃, and the tight PLD ε the paper lacks.

use anyhow::{Context, Result};
use dp_accounting::gdp::{epsilon_for_mu, mu_poisson, mu_uniform, recalibrate_sigma};
use dp_accounting::{Accountant, AccountantKind, DpEvent, NeighbouringRelation};
use dp_optim::gdp::{authors_orders, moments_accountant_epsilon};
use serde::Serialize;

use super::config::AccountingRow;

/// Every accountant's reading of one (q, σ, T, δ).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Readings {
    /// T = epochs·n/B (fractional, the authors' convention).
    pub steps: f64,
    /// The authors' moments accountant (classic RDP conversion, their orders).
    pub eps_ma: f64,
    /// μ_CLT under Poisson sampling.
    pub mu_clt: f64,
    /// ε of μ_CLT-GDP.
    pub eps_clt: f64,
    /// ε of the uniform-sampling CLT (Dong, Roth & Su).
    pub eps_clt_uniform: f64,
    /// Tight ε from privacy loss distributions at ⌈T⌉ steps.
    pub eps_pld: f64,
    /// σ̃: the noise whose Poisson-CLT ε equals ε_MA (the paper's eqs. 7–8).
    pub sigma_tilde: f64,
}

/// The columns of the accounting table, with their keys in `published.json`.
pub const COLUMNS: [(&str, &str); 6] = [
    ("eps_ma", "ε MA (RDP, classic)"),
    ("eps_clt", "ε CLT (Poisson)"),
    ("eps_clt_uniform", "ε CLT (uniform)"),
    ("mu_clt", "μ CLT"),
    ("eps_pld", "ε PLD (tight)"),
    ("sigma_tilde", "σ̃ (CLT ε = MA ε)"),
];

impl Readings {
    /// The value of a column key.
    pub fn get(&self, key: &str) -> Option<f64> {
        Some(match key {
            "eps_ma" => self.eps_ma,
            "eps_clt" => self.eps_clt,
            "eps_clt_uniform" => self.eps_clt_uniform,
            "mu_clt" => self.mu_clt,
            "eps_pld" => self.eps_pld,
            "sigma_tilde" => self.sigma_tilde,
            _ => return None,
        })
    }
}

/// The tight ε of `steps` Poisson-subsampled Gaussian steps (PLD, add-or-remove-one).
pub fn pld_epsilon(q: f64, sigma: f64, steps: u64, delta: f64) -> Result<f64> {
    let mut pld =
        AccountantKind::Pld.build(NeighbouringRelation::AddOrRemoveOne, &authors_orders())?;
    pld.compose(&DpEvent::dp_sgd(q, sigma, steps), 1)?;
    pld.epsilon(delta)
        .with_context(|| format!("PLD at q {q}, σ {sigma}, {steps} steps"))
}

/// All readings for sampling rate q, σ, T steps and δ.
pub fn readings(q: f64, sigma: f64, steps: f64, delta: f64) -> Result<Readings> {
    let (eps_ma, _) = moments_accountant_epsilon(q, sigma, steps, delta);
    let mu = mu_poisson(q, sigma, steps);
    Ok(Readings {
        steps,
        eps_ma,
        mu_clt: mu,
        eps_clt: epsilon_for_mu(delta, mu),
        eps_clt_uniform: epsilon_for_mu(delta, mu_uniform(q, sigma, steps)),
        eps_pld: pld_epsilon(q, sigma, steps.ceil() as u64, delta)?,
        sigma_tilde: recalibrate_sigma(eps_ma, delta, q, steps)?,
    })
}

/// The row label used in tables and `published.json`.
pub fn row_label(row: &AccountingRow, epochs: f64) -> String {
    format!("{} σ={} ep={}", row.dataset, row.sigma, epochs)
}

/// Readings for every epoch count of `row`.
pub fn row_readings(row: &AccountingRow) -> Result<Vec<(f64, Readings)>> {
    let q = row.batch_size as f64 / row.n as f64;
    row.epochs
        .iter()
        .map(|&e| {
            let steps = e * row.n as f64 / row.batch_size as f64;
            Ok((e, readings(q, row.sigma, steps, row.delta)?))
        })
        .collect()
}
