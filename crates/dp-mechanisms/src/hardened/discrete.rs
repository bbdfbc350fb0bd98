//! Exact discrete Laplace and discrete Gaussian samplers (Canonne, Kamath, Steinke 2020,
//! arXiv 2004.00010, Algorithms 1–3), in 128-bit integer arithmetic.

use dp_accounting::DpEvent;

use crate::error::{Error, Result};
use crate::noise::NoiseSource;

/// A non-negative rational `num/den` (den > 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rational {
    /// Numerator.
    pub num: u128,
    /// Denominator.
    pub den: u128,
}

/// The denominator used when converting a float parameter to a rational.
const DENOMINATOR_BITS: u32 = 16;

impl Rational {
    /// The smallest rational with denominator 2^16 that is ≥ `x` (rounding *up*, so that a
    /// noise scale never shrinks). `x` must be finite, ≥ 0 and < 2^64.
    pub fn at_least(name: &'static str, x: f64) -> Result<Self> {
        if !(x.is_finite() && x >= 0.0 && x < 2f64.powi(64)) {
            return Err(Error::InvalidParameter {
                name,
                value: x,
                reason: "must be finite, >= 0 and < 2^64",
            });
        }
        let den = 1u128 << DENOMINATOR_BITS;
        let num = (x * den as f64).ceil() as u128;
        Ok(Rational { num, den })
    }

    /// As a float (for reporting).
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

fn overflow() -> Error {
    Error::InvalidInput("parameters too large for the exact sampler's 128-bit arithmetic".into())
}

/// Bernoulli(num/den).
fn bernoulli(noise: &mut NoiseSource, num: u128, den: u128) -> bool {
    noise.uniform_below(den) < num
}

/// Bernoulli(exp(−num/den)) for num/den ∈ [0, 1] (CKS20 Alg. 1, first case).
fn bernoulli_exp_at_most_one(noise: &mut NoiseSource, num: u128, den: u128) -> Result<bool> {
    let mut k: u128 = 1;
    loop {
        let denominator = den.checked_mul(k).ok_or_else(overflow)?;
        if !bernoulli(noise, num, denominator) {
            return Ok(k % 2 == 1);
        }
        k += 1;
    }
}

/// Bernoulli(exp(−γ)) for rational γ = num/den ≥ 0 (CKS20 Alg. 1).
fn bernoulli_exp(noise: &mut NoiseSource, num: u128, den: u128) -> Result<bool> {
    if num <= den {
        return bernoulli_exp_at_most_one(noise, num, den);
    }
    let whole = num / den;
    let mut i = 0;
    while i < whole {
        if !bernoulli_exp_at_most_one(noise, 1, 1)? {
            return Ok(false);
        }
        i += 1;
    }
    bernoulli_exp_at_most_one(noise, num % den, den)
}

/// Discrete Laplace: `P(x) ∝ exp(−|x|/t)` over the integers, t = `scale`.
///
/// # Privacy
/// Adding it to an integer query of sensitivity Δ is (Δ/t)-DP (CKS20, Prop. 1 /
/// Ghosh, Roughgarden, Sundararajan 2009). The sampler is exact (CKS20 Alg. 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscreteLaplace {
    scale: Rational,
}

impl DiscreteLaplace {
    /// With scale t > 0 (a rational; see [`Rational::at_least`]).
    pub fn new(scale: Rational) -> Result<Self> {
        if scale.num == 0 || scale.den == 0 {
            return Err(Error::InvalidParameter {
                name: "scale",
                value: scale.to_f64(),
                reason: "must be > 0",
            });
        }
        Ok(DiscreteLaplace { scale })
    }

    /// The scale t.
    pub fn scale(&self) -> Rational {
        self.scale
    }

    /// One exact sample.
    pub fn sample(&self, noise: &mut NoiseSource) -> Result<i64> {
        // CKS20 Alg. 2 with t/s = num/den: P(x) ∝ exp(−|x|·s/t).
        let (t, s) = (self.scale.num, self.scale.den);
        loop {
            let u = noise.uniform_below(t);
            if !bernoulli_exp(noise, u, t)? {
                continue;
            }
            let mut v: u128 = 0;
            while bernoulli_exp(noise, 1, 1)? {
                v += 1;
            }
            let x = u
                .checked_add(t.checked_mul(v).ok_or_else(overflow)?)
                .ok_or_else(overflow)?;
            let y = x / s;
            let negative = noise.coin();
            if negative && y == 0 {
                continue;
            }
            let y = i64::try_from(y).map_err(|_| overflow())?;
            return Ok(if negative { -y } else { y });
        }
    }

    /// The event of adding it to an integer query of sensitivity Δ: (Δ/t, 0)-DP.
    pub fn event(&self, integer_sensitivity: u64) -> DpEvent {
        DpEvent::EpsilonDelta {
            epsilon: integer_sensitivity as f64 / self.scale.to_f64(),
            delta: 0.0,
        }
    }
}

/// The largest integer ≤ √(num/den).
fn floor_sqrt_ratio(num: u128, den: u128) -> u128 {
    let target = num / den; // floor(√(n/d)) = floor(√floor(n/d)) for integers.
    let mut x = (target as f64).sqrt() as u128;
    while x * x > target {
        x -= 1;
    }
    while (x + 1) * (x + 1) <= target {
        x += 1;
    }
    x
}

/// The largest σ² (in grid units) the discrete Gaussian sampler accepts: σ ≤ 2^20, so
/// that 2·n·d·t² (n/d = σ², d = 2^16, t ≤ σ + 1) stays below 2^114.
const MAX_SIGMA_SQUARED: f64 = 1_099_511_627_776.0; // 2^40

/// Discrete Gaussian: `P(x) ∝ exp(−x²/(2σ²))` over the integers.
///
/// # Privacy
/// Adding it to an integer query of sensitivity Δ is Δ²/(2σ²)-zCDP (CKS20, Thm 4), and
/// the event is `ZCdp { rho }`. The sampler is CKS20 Alg. 3 (rejection from a discrete
/// Laplace) in exact 128-bit arithmetic; σ is limited to 2^20 grid units. A candidate
/// whose acceptance exponent would overflow 128 bits (|Y| ≥ 2^48/(σ+1), so at least
/// 2^8·σ) is rejected; its acceptance probability is below exp(−2^14), and this is the
/// only deviation from exactness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscreteGaussian {
    sigma_squared: Rational,
}

impl DiscreteGaussian {
    /// With variance parameter σ² (rounded up to a rational).
    pub fn new(sigma: f64) -> Result<Self> {
        if !(sigma.is_finite() && sigma > 0.0 && sigma * sigma <= MAX_SIGMA_SQUARED) {
            return Err(Error::InvalidParameter {
                name: "sigma",
                value: sigma,
                reason: "must be in (0, 2^20]",
            });
        }
        Ok(DiscreteGaussian {
            sigma_squared: Rational::at_least("sigma", sigma * sigma)?,
        })
    }

    /// σ² as used (≥ the requested value).
    pub fn sigma_squared(&self) -> Rational {
        self.sigma_squared
    }

    /// One exact sample.
    pub fn sample(&self, noise: &mut NoiseSource) -> Result<i64> {
        let (n, d) = (self.sigma_squared.num, self.sigma_squared.den);
        let t = floor_sqrt_ratio(n, d) + 1;
        let laplace = DiscreteLaplace::new(Rational { num: t, den: 1 })?;
        // γ = (|Y| − σ²/t)²/(2σ²) = (|Y|·d·t − n)² / (2·n·d·t²).
        let gamma_den = 2u128
            .checked_mul(n)
            .and_then(|x| x.checked_mul(d))
            .and_then(|x| x.checked_mul(t * t))
            .ok_or_else(overflow)?;
        loop {
            let y = laplace.sample(noise)?;
            let scaled = u128::from(y.unsigned_abs()).checked_mul(d * t);
            let gamma_num = scaled.and_then(|s| {
                let diff = s.abs_diff(n);
                diff.checked_mul(diff)
            });
            let Some(gamma_num) = gamma_num else {
                continue; // γ ≥ 2^128/2^114: acceptance probability below exp(−2^14).
            };
            if bernoulli_exp(noise, gamma_num, gamma_den)? {
                return Ok(y);
            }
        }
    }

    /// The event of adding it to an integer query of sensitivity Δ: Δ²/(2σ²)-zCDP.
    pub fn event(&self, integer_sensitivity: u64) -> DpEvent {
        let delta = integer_sensitivity as f64;
        DpEvent::zcdp(delta * delta / (2.0 * self.sigma_squared.to_f64()))
    }
}
