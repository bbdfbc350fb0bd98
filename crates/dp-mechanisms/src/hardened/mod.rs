//! Releases hardened against floating-point attacks.
//!
//! Textbook floating-point Laplace or Gaussian noise leaks the input through the set of
//! representable outputs (Mironov 2012, "On significance of the least significant bits
//! for differential privacy"). Here, as in OpenDP, noise is an exact *integer* sample —
//! discrete Laplace or discrete Gaussian (Canonne, Kamath, Steinke 2020) drawn with
//! rational arithmetic from uniform random integers — added to the input rounded to a
//! grid of spacing 2^k, with the rounding error added to the sensitivity. Every output is
//! a grid point, whatever the input.
//!
//! **What is hardened**: [`GridLaplace`], [`GridGaussian`], [`DiscreteLaplace`],
//! [`DiscreteGaussian`]. **What is not**: the float mechanisms
//! ([`GaussianMechanism`](crate::GaussianMechanism), [`LaplaceMechanism`](crate::LaplaceMechanism))
//! and [`NoiseSource::add_gaussian_f32`](crate::NoiseSource::add_gaussian_f32), which the
//! DP-SGD gradient path uses for speed (millions of draws per step); the selection
//! mechanisms' Gumbel noise is also floating point.

mod discrete;
mod grid;

pub use discrete::{DiscreteGaussian, DiscreteLaplace, Rational};
pub use grid::{GridGaussian, GridLaplace};
