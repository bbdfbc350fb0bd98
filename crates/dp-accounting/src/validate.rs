//! The parameter checks every crate of the workspace goes through: one rule per domain,
//! one wording, and a [`ParameterError`] naming the parameter that each crate's error
//! type turns into its `InvalidParameter { name, value, reason }`.

use thiserror::Error;

/// A numeric parameter outside its domain.
#[derive(Clone, Copy, Debug, Error, PartialEq)]
#[error("{name} ({value}) {reason}")]
pub struct ParameterError {
    /// The parameter's name, as the API spells it.
    pub name: &'static str,
    /// The offending value.
    pub value: f64,
    /// What the value must satisfy.
    pub reason: &'static str,
}

/// The result of a check: the value itself when it is in its domain.
pub type Checked<T> = std::result::Result<T, ParameterError>;

fn check(name: &'static str, value: f64, ok: bool, reason: &'static str) -> Checked<f64> {
    if ok {
        Ok(value)
    } else {
        Err(ParameterError {
            name,
            value,
            reason,
        })
    }
}

/// `value` is finite and > 0.
pub fn positive(name: &'static str, value: f64) -> Checked<f64> {
    let ok = value.is_finite() && value > 0.0;
    check(name, value, ok, "must be finite and > 0")
}

/// `value` is finite and ≥ 0.
pub fn non_negative(name: &'static str, value: f64) -> Checked<f64> {
    let ok = value.is_finite() && value >= 0.0;
    check(name, value, ok, "must be finite and >= 0")
}

/// `value` ∈ (0, 1) (a δ, a target probability).
pub fn open_unit(name: &'static str, value: f64) -> Checked<f64> {
    check(name, value, value > 0.0 && value < 1.0, "must be in (0, 1)")
}

/// `value` ∈ [0, 1].
pub fn unit(name: &'static str, value: f64) -> Checked<f64> {
    check(
        name,
        value,
        (0.0..=1.0).contains(&value),
        "must be in [0, 1]",
    )
}

/// `value` ∈ (0, 1] (a sampling rate, a fraction).
pub fn rate(name: &'static str, value: f64) -> Checked<f64> {
    check(
        name,
        value,
        value > 0.0 && value <= 1.0,
        "must be in (0, 1]",
    )
}

/// A count ≥ 1.
pub fn at_least_one(name: &'static str, value: usize) -> Checked<usize> {
    check(name, value as f64, value >= 1, "must be >= 1")?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_domain_admits_its_values_and_names_what_it_refuses() {
        assert_eq!(positive("sigma", 1.0), Ok(1.0));
        assert!(positive("sigma", 0.0).is_err() && positive("sigma", f64::NAN).is_err());
        assert!(positive("sigma", f64::INFINITY).is_err());
        assert_eq!(non_negative("eps", 0.0), Ok(0.0));
        assert!(non_negative("eps", -1e-300).is_err());
        assert!(open_unit("delta", 1.0).is_err() && open_unit("delta", 0.0).is_err());
        assert_eq!(unit("p", 1.0), Ok(1.0));
        assert!(unit("p", f64::NAN).is_err());
        assert_eq!(rate("q", 1.0), Ok(1.0));
        assert!(rate("q", 0.0).is_err());
        assert!(at_least_one("steps", 0).is_err());
        let refused = positive("noise_multiplier", -2.0)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            refused.as_deref(),
            Some("noise_multiplier (-2) must be finite and > 0")
        );
    }
}
