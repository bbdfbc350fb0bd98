//! The parameter checks every setting goes through, each a typed
//! [`Error::InvalidParameter`] naming the parameter.

use crate::error::{Error, Result};

fn check(name: &'static str, value: f64, ok: bool, reason: &'static str) -> Result<f64> {
    if ok {
        Ok(value)
    } else {
        Err(Error::InvalidParameter {
            name,
            value,
            reason,
        })
    }
}

/// `value` is finite and > 0.
pub fn positive(name: &'static str, value: f64) -> Result<f64> {
    check(
        name,
        value,
        value.is_finite() && value > 0.0,
        "must be finite and > 0",
    )
}

/// `value` is finite and ≥ 0.
pub fn non_negative(name: &'static str, value: f64) -> Result<f64> {
    check(
        name,
        value,
        value.is_finite() && value >= 0.0,
        "must be finite and >= 0",
    )
}

/// `value` ∈ (0, 1] (a sampling rate, a fraction).
pub fn rate(name: &'static str, value: f64) -> Result<f64> {
    check(
        name,
        value,
        value > 0.0 && value <= 1.0,
        "must be in (0, 1]",
    )
}

/// `value` ∈ (0, 1) (a δ).
pub fn open_unit(name: &'static str, value: f64) -> Result<f64> {
    check(name, value, value > 0.0 && value < 1.0, "must be in (0, 1)")
}

/// A count ≥ 1.
pub fn at_least_one(name: &'static str, value: usize) -> Result<usize> {
    check(name, value as f64, value >= 1, "must be >= 1")?;
    Ok(value)
}
