//! A network's parameters as one flat vector, in [`Taps::params`] order: what the DP
//! engine reads, updates and checkpoints.

use candle_core::Var;

use super::taps::Taps;
use crate::error::Result;

impl Taps {
    /// The number of parameters.
    pub fn num_params(&self) -> usize {
        self.params()
            .iter()
            .map(|p| p.var.as_tensor().elem_count())
            .sum()
    }

    /// The parameters' variables, in [`Taps::params`] order.
    pub fn vars(&self) -> Vec<Var> {
        self.params().into_iter().map(|p| p.var).collect()
    }

    /// The parameters, flat, on the host.
    pub fn flat_parameters(&self) -> Result<Vec<f32>> {
        crate::flat::flatten(self.params().iter().map(|p| p.var.as_tensor()))
    }

    /// Replaces the parameters from a flat vector (copied to their device).
    pub fn set_flat_parameters(&self, theta: &[f32]) -> Result<()> {
        crate::flat::set_vars(&self.vars(), theta)
    }

    /// Where each layer's parameters sit in the flat vector: one range per run of
    /// consecutive parameters of one owner (a layer's names share its prefix, so its
    /// parameters are one run), in flat order.
    pub fn layer_ranges(&self) -> Vec<std::ops::Range<usize>> {
        let mut ranges: Vec<(String, std::ops::Range<usize>)> = Vec::new();
        let mut end = 0;
        for p in self.params() {
            let start = end;
            end += p.var.as_tensor().elem_count();
            match ranges.last_mut() {
                Some((owner, range)) if *owner == p.owner => range.end = end,
                _ => ranges.push((p.owner, start..end)),
            }
        }
        ranges.into_iter().map(|(_, range)| range).collect()
    }

    /// Every parameter by name, trainable and frozen, as a
    /// [`StateDict`](super::StateDict) (to save, or to load into another network).
    pub fn state_dict(&self) -> super::StateDict {
        super::StateDict::from_tensors(
            self.params()
                .into_iter()
                .chain(self.frozen_params())
                .map(|p| (p.name, p.var.as_tensor().clone())),
        )
    }

    /// A description of the parameters (names and shapes), for checkpoint fingerprints;
    /// with frozen parameters, theirs too and a digest of their values (a resume on
    /// other public weights is another model).
    pub fn architecture(&self) -> String {
        let describe = |p: &super::Param| format!("{}{:?}", p.name, p.var.as_tensor().dims());
        let mut parts: Vec<String> = self.params().iter().map(describe).collect();
        let frozen = self.frozen_params();
        if !frozen.is_empty() {
            parts.extend(frozen.iter().map(|p| format!("{} frozen", describe(p))));
            parts.push(
                match crate::flat::flatten(frozen.iter().map(|p| p.var.as_tensor())) {
                    Ok(values) => format!("frozen-values {:016x}", fnv1a(&values)),
                    Err(e) => format!("frozen-values unreadable ({e})"),
                },
            );
        }
        parts.extend(self.notes());
        parts.join(" ")
    }
}

/// The 64-bit FNV-1a hash of the values' bits (a fingerprint, not a secret).
fn fnv1a(values: &[f32]) -> u64 {
    values
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, byte| {
            (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}
