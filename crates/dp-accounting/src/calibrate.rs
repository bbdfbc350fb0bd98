//! Solving for the noise multiplier or the number of steps that meets a target (ε, δ).

use serde::{Deserialize, Serialize};

use crate::accountant::Accountant;
use crate::error::{Error, Result};
use crate::event::DpEvent;
use crate::validate;

/// How [`calibrate_noise`] searches.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationOptions {
    /// First upper end of the σ bracket; doubled until ε(σ) ≤ target. Default 10
    /// (Opacus's).
    pub initial_upper: f64,
    /// The search fails past this σ. Default 1e6.
    pub max_noise_multiplier: f64,
    /// Stop as soon as `target − ε(σ_upper) ≤` this. Default `None` (only the σ
    /// tolerance stops the search); Opacus uses 0.01.
    pub epsilon_tolerance: Option<f64>,
    /// Stop when the bracket is narrower than this fraction of σ. Default 1e-6.
    pub relative_tolerance: f64,
    /// The search does not go below this σ. Default 0.05: below it a DP-SGD step
    /// releases nearly the raw clipped sum, and the PLD of a sampled Gaussian needs a
    /// grid that grows as 1/σ² (tens of millions of points at 0.01). When the target
    /// already holds here — e.g. δ at least the sampling rate, where one Poisson step is
    /// (0, q)-DP whatever σ — the target does not constrain σ and the search stops
    /// with an error saying so, instead of bisecting towards 0 without end.
    pub min_noise_multiplier: f64,
}

impl Default for CalibrationOptions {
    fn default() -> Self {
        CalibrationOptions {
            initial_upper: 10.0,
            max_noise_multiplier: 1e6,
            epsilon_tolerance: None,
            relative_tolerance: 1e-6,
            min_noise_multiplier: 0.05,
        }
    }
}

impl CalibrationOptions {
    /// Opacus's `get_noise_multiplier` search: bracket from 10, bisect until ε is within
    /// 0.01 of the target. Reproduces Opacus's published σ values exactly.
    pub fn opacus() -> Self {
        CalibrationOptions {
            epsilon_tolerance: Some(0.01),
            relative_tolerance: 0.0,
            ..Self::default()
        }
    }
}

/// The result of a calibration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibrated<T> {
    /// The calibrated parameter.
    pub value: T,
    /// The ε it achieves at the target δ (never above the target).
    pub epsilon: f64,
}

fn epsilon_of<A: Accountant>(
    make_accountant: &impl Fn() -> Result<A>,
    event: &DpEvent,
    target_delta: f64,
) -> Result<f64> {
    let mut accountant = make_accountant()?;
    accountant.compose(event, 1)?;
    accountant.epsilon(target_delta)
}

/// The smallest noise multiplier σ (up to the tolerances) with ε(σ) ≤ `target_epsilon`
/// at `target_delta`, for any accountant and any event family.
///
/// Brackets by doubling, then bisects; the returned σ is always the upper end of the
/// bracket, whose ε has been evaluated and is ≤ the target: it **never overshoots**.
pub fn calibrate_noise<A: Accountant>(
    make_accountant: impl Fn() -> Result<A>,
    make_event: impl Fn(f64) -> DpEvent,
    target_epsilon: f64,
    target_delta: f64,
    options: CalibrationOptions,
) -> Result<Calibrated<f64>> {
    validate::positive("target_epsilon", target_epsilon)?;
    validate::open_unit("target_delta", target_delta)?;
    validate::positive("initial_upper", options.initial_upper)?;
    validate::non_negative("relative_tolerance", options.relative_tolerance)?;
    validate::positive("min_noise_multiplier", options.min_noise_multiplier)?;
    let eps = |sigma: f64| epsilon_of(&make_accountant, &make_event(sigma), target_delta);
    let floor = options.min_noise_multiplier.min(options.initial_upper);
    // Bisection from 0 (Opacus's midpoints, reproduced exactly); the floor is enforced
    // once the bracket reaches it.
    let mut lo = 0.0;
    let mut hi = options.initial_upper;
    let mut eps_hi = eps(hi)?;
    while eps_hi > target_epsilon {
        hi *= 2.0;
        if hi > options.max_noise_multiplier {
            return Err(Error::Calibration(format!(
                "no noise multiplier up to {} reaches epsilon {target_epsilon} at delta {target_delta}",
                options.max_noise_multiplier
            )));
        }
        eps_hi = eps(hi)?;
    }
    let unconstrained = || {
        Error::Calibration(format!(
            "every noise multiplier down to {floor} already meets epsilon {target_epsilon} at \
             delta {target_delta}: the target does not constrain the noise (is delta at least \
             the sampling rate, or epsilon very large?); lower delta or epsilon"
        ))
    };
    let mut floor_checked = false;
    for _ in 0..200 {
        // Once the bracket nears the floor without ever exceeding the target, the target
        // may hold at every σ: one evaluation at the floor settles it.
        if !floor_checked && lo < floor && hi < 2.0 * floor {
            floor_checked = true;
            if eps(floor)? <= target_epsilon {
                return Err(unconstrained());
            }
            lo = floor;
        }
        if let Some(tol) = options.epsilon_tolerance {
            if target_epsilon - eps_hi <= tol {
                break;
            }
        }
        if hi - lo <= options.relative_tolerance * hi {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        let eps_mid = eps(mid)?;
        if eps_mid < target_epsilon {
            hi = mid;
            eps_hi = eps_mid;
        } else {
            lo = mid;
        }
    }
    Ok(Calibrated {
        value: hi,
        epsilon: eps_hi,
    })
}

/// The largest number of steps with ε ≤ `target_epsilon` at `target_delta`, where
/// `make_event(steps)` describes the whole run. Returns 0 steps if even one step exceeds
/// the target.
pub fn calibrate_steps<A: Accountant>(
    make_accountant: impl Fn() -> Result<A>,
    make_event: impl Fn(u64) -> DpEvent,
    target_epsilon: f64,
    target_delta: f64,
) -> Result<Calibrated<u64>> {
    validate::non_negative("target_epsilon", target_epsilon)?;
    validate::open_unit("target_delta", target_delta)?;
    let eps = |steps: u64| epsilon_of(&make_accountant, &make_event(steps), target_delta);
    let first = eps(1)?;
    if first > target_epsilon {
        return Ok(Calibrated {
            value: 0,
            epsilon: 0.0,
        });
    }
    // Invariant: ε(lo) ≤ target < ε(hi).
    let (mut lo, mut eps_lo) = (1u64, first);
    let mut hi = 2u64;
    loop {
        let e = eps(hi)?;
        if e > target_epsilon {
            break;
        }
        lo = hi;
        eps_lo = e;
        hi = hi.checked_mul(2).ok_or_else(|| {
            Error::Calibration(
                "the budget is never exhausted (epsilon stays below the target)".into(),
            )
        })?;
        if hi > 1 << 48 {
            return Err(Error::Calibration(
                "the budget is never exhausted within 2^48 steps".into(),
            ));
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let e = eps(mid)?;
        if e <= target_epsilon {
            lo = mid;
            eps_lo = e;
        } else {
            hi = mid;
        }
    }
    Ok(Calibrated {
        value: lo,
        epsilon: eps_lo,
    })
}

/// Halvings of the bracket in [`calibrate_share`]: 60 take a bracket of any f64 width to
/// its last bits.
const SHARE_HALVINGS: usize = 60;

/// The largest share x in (0, `upper`] of a run's budget with ε(x) ≤ `target_epsilon`,
/// where `epsilon_of(x)` is the whole run's ε and grows with x (a coordinate selection's
/// ε, say, beside a fixed Gaussian): `upper` when it fits, else the lower end of a
/// bisection of (0, `upper`) ([`SHARE_HALVINGS`] halvings), whose ε has been evaluated
/// and is ≤ the target — it **never overshoots**. An error when no share above 0 fits
/// (the rest of the run alone exceeds the target).
pub fn calibrate_share(
    epsilon_of: impl Fn(f64) -> Result<f64>,
    upper: f64,
    target_epsilon: f64,
) -> Result<Calibrated<f64>> {
    validate::positive("upper", upper)?;
    validate::non_negative("target_epsilon", target_epsilon)?;
    let at_upper = epsilon_of(upper)?;
    if at_upper <= target_epsilon {
        return Ok(Calibrated {
            value: upper,
            epsilon: at_upper,
        });
    }
    // Invariant: ε(lo) ≤ target < ε(hi) (lo = 0 unevaluated).
    let (mut lo, mut eps_lo, mut hi) = (0.0f64, f64::NAN, upper);
    for _ in 0..SHARE_HALVINGS {
        let mid = 0.5 * (lo + hi);
        if mid <= 0.0 {
            hi = mid;
            continue;
        }
        let e = epsilon_of(mid)?;
        if e > target_epsilon {
            hi = mid;
        } else {
            lo = mid;
            eps_lo = e;
        }
    }
    if lo <= 0.0 {
        return Err(Error::Calibration(format!(
            "no share of the budget above 0 meets epsilon {target_epsilon}: the rest of the run alone exceeds it"
        )));
    }
    Ok(Calibrated {
        value: lo,
        epsilon: eps_lo,
    })
}
