//! Per-step RDP curves ε(α) of the mechanisms the RDP accountant supports.

use serde::{Deserialize, Serialize};

use crate::logspace::{log_add, log_binomial, log_erfc, SignedLog};

/// How the fractional-order series for the Poisson-subsampled Gaussian is summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FractionalSeries {
    /// The exact two-sided series with signed binomial coefficients (Mironov, Talwar,
    /// Zhang 2019, arXiv 1908.10530 §3.3), as Opacus, prv_accountant and TF Privacy
    /// ≤ 0.5 compute it. Equals `A_α` (checked against quadrature).
    Signed,
    /// The same series with `|C(α, i)|`, always added: a conservative upper bound on
    /// `A_α`, as dp_accounting ≥ 0.4 computes it (up to 1000 terms, else +∞).
    Absolute,
}

/// Iterations after which the fractional series is declared divergent (dp_accounting's
/// limit); the order then reports +∞, which excludes it from the minimum.
const MAX_SERIES_TERMS: usize = 1000;
/// The signed (exact) series has no cap in Opacus or TF; its terms decay only
/// polynomially (like i^{−α−2}) once i passes z0, so moderate σ can need thousands.
const MAX_SIGNED_SERIES_TERMS: usize = 1_000_000;

/// RDP at order α of the Poisson-subsampled Gaussian with rate q and noise multiplier σ
/// (sensitivity 1, add/remove neighbours).
///
/// # Privacy
/// `RDP(α) = ln A_α / (α−1)` with `A_α = E_{z∼N(0,σ²)}[(1 − q + q e^{(2z−1)/(2σ²)})^α]`
/// (Mironov, Talwar, Zhang 2019, arXiv 1908.10530, Thm 4 / §3.3). Integer α uses the
/// binomial expansion in log space with `ln Γ` coefficients; fractional α the two-sided
/// erfc series selected by `series`.
pub fn poisson_gaussian(q: f64, sigma: f64, alpha: f64, series: FractionalSeries) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if sigma == 0.0 || alpha.is_infinite() {
        return f64::INFINITY;
    }
    if q == 1.0 {
        return alpha / (2.0 * sigma * sigma);
    }
    let log_a = if alpha.fract() == 0.0 {
        log_a_integer(q, sigma, alpha)
    } else {
        match series {
            FractionalSeries::Signed => log_a_fractional_signed(q, sigma, alpha),
            FractionalSeries::Absolute => log_a_fractional_absolute(q, sigma, alpha),
        }
    };
    log_a / (alpha - 1.0)
}

fn log_a_integer(q: f64, sigma: f64, alpha: f64) -> f64 {
    let log_q = q.ln();
    let log_1mq = (-q).ln_1p();
    let two_var = 2.0 * sigma * sigma;
    let mut log_a = f64::NEG_INFINITY;
    let n = alpha as u64;
    for i in 0..=n {
        let i_f = i as f64;
        let term = log_binomial(alpha, i_f)
            + i_f * log_q
            + (alpha - i_f) * log_1mq
            + (i_f * i_f - i_f) / two_var;
        log_a = log_add(log_a, term);
    }
    log_a
}

/// The terms `(log_s0, log_s1)` of the two-sided series at index i, plus the sign of
/// `C(α, i)`; `log_abs_coef` is `ln |C(α, i)|`.
fn series_terms(q: f64, sigma: f64, alpha: f64, i: f64, log_abs_coef: f64, z0: f64) -> (f64, f64) {
    let j = alpha - i;
    let log_q = q.ln();
    let log_1mq = (-q).ln_1p();
    let two_var = 2.0 * sigma * sigma;
    let scale = std::f64::consts::SQRT_2 * sigma;
    let log_t0 = log_abs_coef + i * log_q + j * log_1mq;
    let log_t1 = log_abs_coef + j * log_q + i * log_1mq;
    let log_e0 = 0.5f64.ln() + log_erfc((i - z0) / scale);
    let log_e1 = 0.5f64.ln() + log_erfc((z0 - j) / scale);
    (
        log_t0 + (i * i - i) / two_var + log_e0,
        log_t1 + (j * j - j) / two_var + log_e1,
    )
}

fn log_a_fractional_signed(q: f64, sigma: f64, alpha: f64) -> f64 {
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let mut a0 = SignedLog::ZERO;
    let mut a1 = SignedLog::ZERO;
    // |C(α, i)| and its sign, updated term by term: C(α, i) = C(α, i−1)(α − i + 1)/i.
    let mut log_abs_coef = 0.0;
    let mut coef_positive = true;
    for i in 0..MAX_SIGNED_SERIES_TERMS {
        let i_f = i as f64;
        if i > 0 {
            let factor = alpha - i_f + 1.0;
            log_abs_coef += factor.abs().ln() - i_f.ln();
            if factor < 0.0 {
                coef_positive = !coef_positive;
            }
        }
        let (log_s0, log_s1) = series_terms(q, sigma, alpha, i_f, log_abs_coef, z0);
        a0 = a0.add(SignedLog::new(coef_positive, log_s0));
        a1 = a1.add(SignedLog::new(coef_positive, log_s1));
        if log_s0.max(log_s1) < -30.0 {
            let total = a0.add(a1);
            return if total.positive {
                total.log_abs
            } else {
                f64::INFINITY
            };
        }
    }
    f64::INFINITY
}

fn log_a_fractional_absolute(q: f64, sigma: f64, alpha: f64) -> f64 {
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let (mut a0, mut a1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    let (mut last_s0, mut last_s1) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for i in 0..MAX_SERIES_TERMS {
        let i_f = i as f64;
        let log_abs_coef = log_abs_binomial(alpha, i_f);
        let (log_s0, log_s1) = series_terms(q, sigma, alpha, i_f, log_abs_coef, z0);
        a0 = log_add(a0, log_s0);
        a1 = log_add(a1, log_s1);
        let total = log_add(a0, a1);
        if log_s0 < last_s0 && log_s1 < last_s1 && log_s0.max(log_s1) < total - 30.0 {
            return total;
        }
        last_s0 = log_s0;
        last_s1 = log_s1;
    }
    f64::INFINITY
}

/// `ln |C(α, i)|` for real α and integer i, via `ln |Γ|` with the reflection formula.
fn log_abs_binomial(alpha: f64, i: f64) -> f64 {
    log_abs_gamma(alpha + 1.0) - log_abs_gamma(i + 1.0) - log_abs_gamma(alpha - i + 1.0)
}

fn log_abs_gamma(x: f64) -> f64 {
    use statrs::function::gamma::ln_gamma;
    if x > 0.0 {
        ln_gamma(x)
    } else {
        // Γ(x)Γ(1−x) = π / sin(πx).
        std::f64::consts::PI.ln() - (std::f64::consts::PI * x).sin().abs().ln() - ln_gamma(1.0 - x)
    }
}

/// RDP at order α of the Gaussian mechanism under sampling without replacement
/// (sample m of n, q = m/n, replace-one neighbours).
///
/// # Privacy
/// Wang, Balle, Kasiviswanathan 2019 (AISTATS, arXiv 1808.00087) Thm 27 in its
/// strengthened form for the subsampled Gaussian (forward differences of
/// `exp((x−1)x/(2σ²))`), exactly for integer α ≤ 256 and with the cruder
/// `2e^{(j−1)ε(j)}` bound above; fractional α by linear interpolation of the cumulant
/// generating function `(α−1)RDP(α)` between ⌊α⌋ and ⌈α⌉ (their Corollary 10). This is
/// the algorithm of dp_accounting's `_compute_rdp_sample_wor_gaussian`.
pub fn sampled_without_replacement_gaussian(q: f64, sigma: f64, alpha: f64) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if q == 1.0 {
        return alpha / (2.0 * sigma * sigma);
    }
    if sigma == 0.0 || alpha.is_infinite() {
        return f64::INFINITY;
    }
    if alpha.fract() == 0.0 {
        wor_log_a_integer(q, sigma, alpha as u64) / (alpha - 1.0)
    } else {
        let lo = alpha.floor();
        let hi = alpha.ceil();
        let t = alpha - lo;
        let x = wor_log_a_integer(q, sigma, lo as u64);
        let y = wor_log_a_integer(q, sigma, hi as u64);
        ((1.0 - t) * x + t * y) / (alpha - 1.0)
    }
}

/// The order up to which the WBK bound is computed exactly (O(α²) forward differences).
const WOR_EXACT_MAX_ORDER: u64 = 256;

fn wor_log_a_integer(q: f64, sigma: f64, alpha: u64) -> f64 {
    if alpha <= 1 {
        return 0.0;
    }
    let var2 = 2.0 * sigma * sigma;
    // cgf(x) = x(x+1)/(2σ²): (x)·RDP_Gaussian(x+1).
    let cgf = |x: f64| x * (x + 1.0) / var2;
    let rdp2 = 2.0 / var2;
    let log_f2m1 = rdp2 + (-(-rdp2).exp()).ln_1p();
    let alpha_f = alpha as f64;
    let log_q = q.ln();
    let first = 2.0 * log_q
        + log_binomial(alpha_f, 2.0)
        + (4f64.ln() + log_f2m1).min(rdp2 + std::f64::consts::LN_2);
    let mut log_a = log_add(0.0, first);
    if alpha <= WOR_EXACT_MAX_ORDER {
        let deltas = forward_differences_log(cgf, alpha as usize);
        for i in 3..=alpha {
            let i_f = i as f64;
            let lo = deltas[(2 * (i / 2) - 1) as usize];
            let hi = deltas[(2 * i.div_ceil(2) - 1) as usize];
            let s = (4f64.ln() + 0.5 * (lo + hi)).min(std::f64::consts::LN_2 + cgf(i_f - 1.0))
                + i_f * log_q
                + log_binomial(alpha_f, i_f);
            log_a = log_add(log_a, s);
        }
    } else {
        for i in 3..=alpha {
            let i_f = i as f64;
            let s =
                std::f64::consts::LN_2 + cgf(i_f - 1.0) + i_f * log_q + log_binomial(alpha_f, i_f);
            log_a = log_add(log_a, s);
        }
    }
    log_a
}

/// `ln |Δ^{k+1} h(0)|` for k = 0..=n+1, where `h(j) = exp(cgf(j − 1))` (so h(0) = 1).
fn forward_differences_log(cgf: impl Fn(f64) -> f64, n: usize) -> Vec<f64> {
    let len = n + 3;
    let mut values: Vec<SignedLog> = (0..len)
        .map(|j| SignedLog::new(true, if j == 0 { 0.0 } else { cgf(j as f64 - 1.0) }))
        .collect();
    let mut deltas = Vec::with_capacity(n + 2);
    for i in 0..n + 2 {
        let m = n + 2 - i;
        for j in 0..m {
            values[j] = values[j + 1].add(values[j].neg());
        }
        deltas.push(values[0].log_abs);
    }
    deltas
}

/// RDP at order α of the Laplace mechanism with noise multiplier b (ε = 1/b).
///
/// # Privacy
/// Mironov 2017 (arXiv 1702.07476) Prop. 6:
/// `ε + ln(1 + (α−1)(e^{ε(1−2α)} − 1)/(2α−1))/(α−1)`, the KL limit `ε + e^{−ε} − 1` at
/// α = 1 and a Taylor series of `ln(1+x)/x` for 1 < α < 1.1. Exact.
pub fn laplace(noise_multiplier: f64, alpha: f64) -> f64 {
    if noise_multiplier == 0.0 {
        return f64::INFINITY;
    }
    let eps = 1.0 / noise_multiplier;
    if alpha.is_infinite() {
        return eps;
    }
    if alpha == 1.0 {
        return eps + (-eps).exp_m1();
    }
    let c = (eps * (1.0 - 2.0 * alpha)).exp_m1() / (2.0 * alpha - 1.0);
    if alpha < 1.1 {
        // ln(1 + c·x)/x = c Σ_{k≥1} (−c x)^{k−1}/k with x = α − 1 and |c x| ≤ 0.1.
        let v = -c * (alpha - 1.0);
        let mut sum = 0.0;
        let mut power = 1.0;
        for k in 1..100 {
            sum += power / f64::from(k);
            power *= v;
        }
        eps + c * sum
    } else {
        eps + ((alpha - 1.0) * c).ln_1p() / (alpha - 1.0)
    }
}

/// RDP at order α of an ε-DP mechanism that is ε-bounded range (the exponential
/// mechanism).
///
/// # Privacy
/// Cesar & Rogers 2021 (arXiv 2004.07223) §3: ε-BR implies (ξ, ε²/8)-zCDP with
/// `ξ = ε/(e^ε−1) − 1 − ln(ε/(e^ε−1)) − ε²/8`; and every ε-DP mechanism has
/// `D_α ≤ ε`. Returns `min(ξ + α ε²/8, ε)`.
pub fn exponential_mechanism(epsilon: f64, alpha: f64) -> f64 {
    let ratio = epsilon / epsilon.exp_m1();
    let xi = ratio - 1.0 - ratio.ln() - epsilon * epsilon / 8.0;
    (xi + epsilon * epsilon / 8.0 * alpha).min(epsilon)
}

/// RDP at order α of randomized response with parameter ε, the worst case of an
/// (ε, 0)-DP mechanism's Rényi divergence; used for `EpsilonDelta` events (their δ is
/// tracked separately).
///
/// # Privacy
/// Mironov 2017 (arXiv 1702.07476) Prop. 5 (randomized response):
/// `(ε α + ln(1 + e^{ε(1−2α)}) − ln(1 + e^ε))/(α−1)`, which upper-bounds `D_α` of any
/// ε-DP pair (Mironov 2017 §III; dp_accounting uses the same bound).
pub fn randomized_response(epsilon: f64, alpha: f64) -> f64 {
    let log1p_exp = |x: f64| {
        if x > 0.0 {
            x + (-x).exp().ln_1p()
        } else {
            x.exp().ln_1p()
        }
    };
    (epsilon * alpha + log1p_exp(epsilon * (1.0 - 2.0 * alpha)) - log1p_exp(epsilon))
        / (alpha - 1.0)
}

/// RDP at order α of Poisson sampling with rate q applied to *any* mechanism whose RDP
/// curve is `inner` (and pure-DP ε `pure`, ∞ if none), for add/remove neighbours.
///
/// # Privacy
/// The bound the authors of Zhu & Wang 2019 (ICML, PMLR 97, "Poisson Subsampled Rényi
/// Differential Privacy") evaluate by default in their library autodp
/// (`compose_poisson_subsampled_mechanisms1`, "no additional assumptions are needed").
/// It is **not** the paper's stated general upper bound (PMLR numbering Thm 5, with
/// `3·Σ_{j≥3} C(m,j)q^j(1−q)^{m−j}e^{(j−1)ε(j)}`), and no published proof of this form was
/// found; a one-off numerical check against the exact subsampled-Laplace RDP found it
/// never below it, and it needs `inner` to bound the divergence in both directions.
/// An open question (docs/accounting.md, "RDP"). For integer m ≥ 2,
///
/// ```text
/// (m−1)ε(m) ≤ log[(1−q)^{m−1}(1+(m−1)q) + C(m,2)q²(1−q)^{m−2}e^{ε′(2)}
///                 + Σ_{j=3}^{m} C(m,j) q^j (1−q)^{m−j} e^{j·ε′(j+1)}]
/// ```
///
/// with ε′ the inner curve. RDP is non-decreasing in α, so a fractional α takes the
/// bound at ⌈α⌉ (and α < 2 the bound at 2). Every order is also capped by the amplified
/// pure-DP bound `ln(1 + q(e^{ε_pure} − 1))` (Balle, Barthe, Gaboardi 2018, Thm 8), since
/// D_α ≤ D_∞. q = 1 is the inner curve itself.
pub fn poisson_sampled_general(q: f64, inner: impl Fn(f64) -> f64, pure: f64, alpha: f64) -> f64 {
    if q >= 1.0 {
        return inner(alpha);
    }
    if q <= 0.0 {
        return 0.0;
    }
    let m = alpha.ceil().max(2.0) as u64;
    let (log_q, log_1mq) = (q.ln(), (-q).ln_1p());
    let mf = m as f64;
    let mut log_total = (mf - 1.0) * log_1mq + ((mf - 1.0) * q).ln_1p();
    log_total = log_add(
        log_total,
        log_binomial(mf, 2.0) + 2.0 * log_q + (mf - 2.0) * log_1mq + inner(2.0),
    );
    for j in 3..=m {
        let jf = j as f64;
        log_total = log_add(
            log_total,
            log_binomial(mf, jf) + jf * log_q + (mf - jf) * log_1mq + jf * inner(jf + 1.0),
        );
    }
    let bound = log_total / (mf - 1.0);
    if pure.is_finite() {
        bound.min((q * pure.exp_m1()).ln_1p())
    } else {
        bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_series_equals_integer_formula_near_integers() {
        // A_α is continuous in α: the fractional series just off an integer must agree
        // with the binomial formula at the integer.
        for &(q, sigma) in &[(0.01, 1.0), (0.04, 1.5), (0.2, 0.8)] {
            let at_int = poisson_gaussian(q, sigma, 3.0, FractionalSeries::Signed);
            let near = poisson_gaussian(q, sigma, 3.0 + 1e-9, FractionalSeries::Signed);
            assert!((at_int - near).abs() / at_int < 1e-6, "{at_int} vs {near}");
        }
    }
}
