//! Discrete privacy loss distributions on a uniform grid, and their composition.

use realfft::num_complex::Complex;
use realfft::RealFftPlanner;

use crate::error::{Error, Result};

/// The largest PMF (in grid points) the accountant will build: 2^25 doubles is 256 MiB.
pub(crate) const MAX_GRID_POINTS: usize = 1 << 25;

/// A sub-probability mass function over privacy losses `(lower + i)·interval`, plus the
/// mass at loss +∞.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LossPmf {
    pub interval: f64,
    pub lower: i64,
    pub probs: Vec<f64>,
    pub infinity_mass: f64,
}

impl LossPmf {
    /// The distribution of a mechanism that leaks nothing: all mass at loss 0.
    pub fn identity(interval: f64) -> Self {
        LossPmf {
            interval,
            lower: 0,
            probs: vec![1.0],
            infinity_mass: 0.0,
        }
    }

    /// `weight·other + (1 − weight)·self`, on the same grid: the privacy loss
    /// distribution of a pair that reveals which of the two it drew from (a variable with
    /// the same distribution under both datasets), which dominates the pair that does not.
    pub fn mixture(&self, other: &LossPmf, weight: f64) -> Result<LossPmf> {
        if self.interval != other.interval || !(0.0..=1.0).contains(&weight) {
            return Err(Error::Numerical(format!(
                "a mixture of privacy loss distributions needs one grid and a weight in [0, 1] \
                 (intervals {} and {}, weight {weight})",
                self.interval, other.interval
            )));
        }
        let lower = self.lower.min(other.lower);
        let end = |p: &LossPmf| p.lower + p.probs.len() as i64;
        let mut probs = vec![0.0; (end(self).max(end(other)) - lower) as usize];
        for (pmf, w) in [(self, 1.0 - weight), (other, weight)] {
            let offset = (pmf.lower - lower) as usize;
            for (slot, p) in probs[offset..].iter_mut().zip(&pmf.probs) {
                *slot += w * p;
            }
        }
        Ok(LossPmf {
            interval: self.interval,
            lower,
            probs,
            infinity_mass: (1.0 - weight) * self.infinity_mass + weight * other.infinity_mass,
        })
    }

    fn loss(&self, i: usize) -> f64 {
        (self.lower + i as i64) as f64 * self.interval
    }

    /// The hockey-stick divergence `δ(ε) = m_∞ + Σ_{ℓ>ε} p_ℓ (1 − e^{ε−ℓ})`.
    pub fn delta(&self, epsilon: f64) -> f64 {
        let mut delta = self.infinity_mass;
        for (i, &p) in self.probs.iter().enumerate().rev() {
            let loss = self.loss(i);
            if loss <= epsilon {
                break;
            }
            delta += p * -(epsilon - loss).exp_m1();
        }
        delta.min(1.0)
    }

    /// The smallest ε ≥ 0 with `δ(ε) ≤ delta` (+∞ if the mass at infinity exceeds δ).
    pub fn epsilon(&self, delta: f64) -> f64 {
        if self.infinity_mass > delta {
            return f64::INFINITY;
        }
        // Scan from the largest loss down. On [ℓ_{j−1}, ℓ_j), δ(ε) = A − e^ε B with
        // A = m_∞ + Σ_{i≥j} p_i and B = Σ_{i≥j} p_i e^{−ℓ_i}.
        // B is kept as e^{ℓ_top}·B (ℓ_top the largest loss), so that neither e^{−ℓ} nor
        // e^{ε} overflows or underflows where ε runs into the hundreds.
        let top = self.loss(self.probs.len().saturating_sub(1));
        let mut mass_above = self.infinity_mass;
        let mut weighted_above = 0.0;
        for j in (0..self.probs.len()).rev() {
            mass_above += self.probs[j];
            weighted_above += self.probs[j] * (top - self.loss(j)).exp();
            let next_lower = if j == 0 {
                f64::NEG_INFINITY
            } else {
                self.loss(j - 1)
            };
            let delta_at_next = mass_above - ((next_lower - top).exp() * weighted_above);
            if next_lower == f64::NEG_INFINITY || delta_at_next > delta {
                if weighted_above <= 0.0 {
                    return 0.0;
                }
                let eps = ((mass_above - delta) / weighted_above).ln() + top;
                return eps.max(next_lower).max(0.0);
            }
            if next_lower <= 0.0 {
                // δ(ε) ≤ target already at a non-positive ε.
                return 0.0;
            }
        }
        0.0
    }

    /// `ln Σ p_i e^{t ℓ_i}` over the finite part, shifted by the largest exponent so
    /// that one `exp` per point suffices.
    fn log_mgf(&self, t: f64) -> f64 {
        let (first, last) = match (
            self.probs.iter().position(|&p| p > 0.0),
            self.probs.iter().rposition(|&p| p > 0.0),
        ) {
            (Some(first), Some(last)) => (first, last),
            _ => return f64::NEG_INFINITY,
        };
        let shift = (t * self.loss(first)).max(t * self.loss(last));
        let step = t * self.interval;
        let start = t * self.loss(first) - shift;
        let sum: f64 = self.probs[first..=last]
            .iter()
            .enumerate()
            .map(|(i, &p)| p * (start + step * i as f64).exp())
            .sum();
        shift + sum.ln()
    }

    /// Bounds `[lo, hi]` (in grid indices relative to `count · lower`) that hold all but
    /// `tail_mass` of the `count`-fold composition, by Chernoff bounds on each side.
    fn composed_window(&self, count: u64, tail_mass: f64) -> Result<(i64, i64)> {
        let k = count as f64;
        let too_long = || {
            Error::Numerical(format!(
                "{count} compositions of a {}-point distribution exceed the PLD grid limit",
                self.probs.len()
            ))
        };
        let full_hi = i64::try_from(self.probs.len() - 1)
            .ok()
            .zip(i64::try_from(count).ok())
            .and_then(|(n, c)| n.checked_mul(c))
            .ok_or_else(too_long)?;
        let log_half_tail = (tail_mass / 2.0).ln();
        let mut hi_loss = f64::INFINITY;
        let mut lo_loss = f64::NEG_INFINITY;
        // Orders t from 1e-3 to ~1e4 (loss units): the optimum for a 1e-15 tail lies
        // well inside; a factor-2 grid loses little against the exact minimiser.
        for j in 0..24 {
            let t = 1e-3 * 2f64.powi(j);
            // P(S ≥ s) ≤ exp(k Λ(t) − t s)  ⇒  s = (k Λ(t) − ln(τ/2)) / t.
            hi_loss = hi_loss.min((k * self.log_mgf(t) - log_half_tail) / t);
            lo_loss = lo_loss.max(-(k * self.log_mgf(-t) - log_half_tail) / t);
        }
        let base = self.lower as f64 * k;
        let clamp = |x: f64, default: f64| {
            if x.is_nan() {
                default
            } else {
                x.clamp(0.0, full_hi as f64)
            }
        };
        let lo = clamp(((lo_loss / self.interval) - base).floor(), 0.0);
        let hi = clamp(((hi_loss / self.interval) - base).ceil(), full_hi as f64);
        let (lo, hi) = if lo > hi {
            (0.0, full_hi as f64)
        } else {
            (lo, hi)
        };
        if hi - lo >= MAX_GRID_POINTS as f64 {
            return Err(too_long());
        }
        Ok((lo as i64, hi as i64))
    }

    /// The `count`-fold self-composition by one FFT, exponentiating the spectrum.
    ///
    /// Mass outside a Chernoff window holding all but `tail_mass` of the result is moved
    /// to +∞ (pessimistic); it also bounds what the cyclic FFT aliases into the window.
    pub fn self_compose(&self, count: u64, tail_mass: f64) -> Result<LossPmf> {
        if count == 0 {
            return Ok(LossPmf::identity(self.interval));
        }
        if count == 1 {
            return Ok(self.clone());
        }
        let finite_mass: f64 = self.probs.iter().sum();
        let infinity_mass = 1.0 - (1.0 - self.infinity_mass).powf(count as f64);
        let (lo, hi) = self.composed_window(count, tail_mass)?;
        let lower = self
            .lower
            .checked_mul(count as i64)
            .and_then(|l| l.checked_add(lo))
            .ok_or_else(|| Error::Numerical("the composed loss grid overflows".into()))?;
        let window = (hi - lo + 1) as usize;
        // The window is exact when it covers every composed offset, 0..=(n−1)·count.
        let truncated = lo > 0 || (hi as u64) < (self.probs.len() as u64 - 1).saturating_mul(count);
        let fft_len = fast_fft_len(window);
        let mut buffer = vec![0.0; fft_len];
        for (i, &p) in self.probs.iter().enumerate() {
            buffer[i % fft_len] += p;
        }
        let k = count as f64;
        let result = cyclic_transform(buffer, |z| {
            let (r, theta) = z.to_polar();
            Complex::from_polar(r.powf(k), theta * k)
        });
        let probs: Vec<f64> = (0..window)
            .map(|m| result[((lo + m as i64).rem_euclid(fft_len as i64)) as usize].max(0.0))
            .collect();
        let mut out = LossPmf {
            interval: self.interval,
            lower,
            probs,
            infinity_mass,
        };
        if truncated {
            out.infinity_mass = (out.infinity_mass + tail_mass).min(1.0);
        }
        // Normalisation drift from rounding must not create mass.
        let expected = finite_mass.powf(k);
        let got: f64 = out.probs.iter().sum();
        if got > expected && got > 0.0 {
            let scale = expected / got;
            out.probs.iter_mut().for_each(|p| *p *= scale);
        }
        out.trim(0.0);
        Ok(out)
    }

    /// The composition of two distributions on the same grid (linear convolution by FFT),
    /// then tails holding at most `tail_mass` moved to +∞.
    pub fn compose(&self, other: &LossPmf, tail_mass: f64) -> Result<LossPmf> {
        debug_assert_eq!(self.interval, other.interval);
        let len = self.probs.len() + other.probs.len() - 1;
        if len > MAX_GRID_POINTS {
            return Err(Error::Numerical(format!(
                "the composed distribution needs {len} grid points (limit {MAX_GRID_POINTS})"
            )));
        }
        let probs = if self.probs.len().min(other.probs.len()) <= 64 {
            direct_convolution(&self.probs, &other.probs)
        } else {
            let fft_len = fast_fft_len(len);
            let mut a = vec![0.0; fft_len];
            a[..self.probs.len()].copy_from_slice(&self.probs);
            let mut b = vec![0.0; fft_len];
            b[..other.probs.len()].copy_from_slice(&other.probs);
            let spectrum_b = forward_spectrum(b);
            let mut index = 0;
            let mut result = cyclic_transform(a, |z| {
                let w = z * spectrum_b[index];
                index += 1;
                w
            });
            result.truncate(len);
            result.iter_mut().for_each(|p| *p = p.max(0.0));
            result
        };
        let infinity_mass = 1.0 - (1.0 - self.infinity_mass) * (1.0 - other.infinity_mass);
        let mut out = LossPmf {
            interval: self.interval,
            lower: self.lower + other.lower,
            probs,
            infinity_mass,
        };
        out.trim(tail_mass);
        Ok(out)
    }

    /// Moves at most `tail_mass/2` from each end to +∞ and drops exact zeros at the ends.
    fn trim(&mut self, tail_mass: f64) {
        let half = tail_mass / 2.0;
        let mut start = 0;
        let mut removed = 0.0;
        while start + 1 < self.probs.len() && removed + self.probs[start] <= half {
            removed += self.probs[start];
            start += 1;
        }
        let mut end = self.probs.len();
        let mut removed_top = 0.0;
        while end > start + 1 && removed_top + self.probs[end - 1] <= half {
            removed_top += self.probs[end - 1];
            end -= 1;
        }
        self.infinity_mass = (self.infinity_mass + removed + removed_top).min(1.0);
        self.probs.truncate(end);
        self.probs.drain(..start);
        self.lower += start as i64;
    }
}

fn direct_convolution(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; a.len() + b.len() - 1];
    for (i, &x) in a.iter().enumerate() {
        if x == 0.0 {
            continue;
        }
        for (j, &y) in b.iter().enumerate() {
            out[i + j] += x * y;
        }
    }
    out
}

fn forward_spectrum(mut input: Vec<f64>) -> Vec<Complex<f64>> {
    let mut planner = RealFftPlanner::<f64>::new();
    let forward = planner.plan_fft_forward(input.len());
    let mut spectrum = forward.make_output_vec();
    // Lengths match by construction, so the transform cannot fail.
    let _ = forward.process(&mut input, &mut spectrum);
    spectrum
}

/// Real FFT of `input`, `map` on each frequency, inverse FFT, scaled by 1/n.
fn cyclic_transform(
    input: Vec<f64>,
    mut map: impl FnMut(Complex<f64>) -> Complex<f64>,
) -> Vec<f64> {
    let n = input.len();
    let mut spectrum = forward_spectrum(input);
    for z in spectrum.iter_mut() {
        *z = map(*z);
    }
    // The inverse real FFT needs exactly real DC and Nyquist terms.
    if let Some(first) = spectrum.first_mut() {
        first.im = 0.0;
    }
    if n.is_multiple_of(2) {
        if let Some(last) = spectrum.last_mut() {
            last.im = 0.0;
        }
    }
    let mut planner = RealFftPlanner::<f64>::new();
    let inverse = planner.plan_fft_inverse(n);
    let mut output = inverse.make_output_vec();
    let _ = inverse.process(&mut spectrum, &mut output);
    let scale = 1.0 / n as f64;
    output.iter_mut().for_each(|x| *x *= scale);
    output
}

/// The smallest length ≥ `n` of the form 2^a·3^b (fast for rustfft).
fn fast_fft_len(n: usize) -> usize {
    let mut best = n.next_power_of_two();
    let mut three = 1;
    while three < best {
        let mut candidate = three;
        while candidate < n {
            candidate *= 2;
        }
        best = best.min(candidate);
        three *= 3;
    }
    best.max(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coin(interval: f64) -> LossPmf {
        // Losses ±1 (in units of `interval` = 1) with probabilities e/(1+e), 1/(1+e).
        let e = 1f64.exp();
        LossPmf {
            interval,
            lower: -1,
            probs: vec![1.0 / (1.0 + e), 0.0, e / (1.0 + e)],
            infinity_mass: 0.0,
        }
    }

    #[test]
    fn self_composition_matches_repeated_convolution() {
        let pmf = coin(1.0);
        let mut direct = LossPmf::identity(1.0);
        for _ in 0..7 {
            direct = direct.compose(&pmf, 0.0).expect("small");
        }
        let fft = pmf.self_compose(7, 0.0).expect("small");
        for eps in [0.0, 0.5, 1.0, 3.0, 5.0] {
            assert!((direct.delta(eps) - fft.delta(eps)).abs() < 1e-12);
        }
    }

    /// δ(ε) is linear in the distribution, so a mixture's δ is the mixture of the δs.
    #[test]
    fn a_mixtures_delta_is_the_mixture_of_the_deltas() -> Result<()> {
        let a = coin(0.1);
        let b = LossPmf {
            interval: 0.1,
            lower: 3,
            probs: vec![0.2, 0.5],
            infinity_mass: 0.3,
        };
        let m = a.mixture(&b, 0.25)?;
        assert_eq!(m.lower, a.lower.min(3));
        for eps in [0.0, 0.15, 0.35, 1.0] {
            let want = 0.75 * a.delta(eps) + 0.25 * b.delta(eps);
            assert!((m.delta(eps) - want).abs() < 1e-15, "{eps}");
        }
        assert!(a.mixture(&LossPmf::identity(0.2), 0.5).is_err());
        assert!(a.mixture(&b, 1.5).is_err());
        Ok(())
    }

    #[test]
    fn epsilon_inverts_delta() {
        let pmf = coin(1.0).self_compose(5, 0.0).expect("small");
        for target in [1e-3, 1e-2, 0.1] {
            let eps = pmf.epsilon(target);
            assert!((pmf.delta(eps) - target).abs() < 1e-12, "{eps}");
        }
    }

    #[test]
    fn fft_lengths_are_smooth_and_large_enough() {
        for n in [1, 2, 3, 5, 17, 1000, 86_001, 262_145] {
            let m = fast_fft_len(n);
            assert!(m >= n);
            let mut r = m;
            while r.is_multiple_of(2) {
                r /= 2;
            }
            while r.is_multiple_of(3) {
                r /= 3;
            }
            assert_eq!(r, 1);
        }
    }
}
