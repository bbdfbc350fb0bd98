//! The Laplace mechanism.

use dp_accounting::DpEvent;

use crate::error::Result;
use crate::mechanism::Mechanism;
use crate::noise::NoiseSource;
use dp_accounting::validate;

/// Adds `Lap(b)` noise to a query of L1 sensitivity Δ.
///
/// # Privacy
/// (Δ/b)-DP: Dwork & Roth 2014, Thm 3.6. Its exact RDP curve is Mironov 2017 Prop. 6;
/// the event is `Laplace { noise_multiplier: b/Δ }`. Floating-point releases are not
/// hardened (see [`crate::hardened::GridLaplace`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaplaceMechanism {
    sensitivity: f64,
    scale: f64,
}

impl LaplaceMechanism {
    /// From the L1 sensitivity Δ and the noise scale b.
    pub fn new(sensitivity: f64, scale: f64) -> Result<Self> {
        validate::positive("sensitivity", sensitivity)?;
        validate::positive("scale", scale)?;
        Ok(LaplaceMechanism { sensitivity, scale })
    }

    /// ε-DP: b = Δ/ε.
    pub fn from_epsilon(sensitivity: f64, epsilon: f64) -> Result<Self> {
        validate::positive("epsilon", epsilon)?;
        Self::new(sensitivity, sensitivity / epsilon)
    }

    /// The noise scale b.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// ε = Δ/b.
    pub fn epsilon(&self) -> f64 {
        self.sensitivity / self.scale
    }

    /// Releases one value.
    pub fn release(&self, value: f64, noise: &mut NoiseSource) -> f64 {
        value + noise.laplace(self.scale)
    }

    /// Releases a vector in place (Δ is the vector's L1 sensitivity).
    pub fn release_in_place(&self, values: &mut [f64], noise: &mut NoiseSource) {
        for v in values.iter_mut() {
            *v += noise.laplace(self.scale);
        }
    }
}

impl Mechanism for LaplaceMechanism {
    fn event(&self) -> DpEvent {
        DpEvent::laplace(self.scale / self.sensitivity)
    }
}
