//! How a planned route (nn/executor.rs) holds the taps: where each layer's variables sit
//! in the flat θ, and the checks before every step that they still do.

use std::ops::Range;

use candle_core::Var;

use super::taps::Taps;
use crate::error::{Error, Result};

/// Where each layer's variables (in the order given) sit in the taps' flat θ (sorted by
/// name), if the taps hold exactly these variables and each layer is one owner of its
/// own (so that per-layer clipping groups as the taps do); with the count of parameters.
pub(crate) fn layer_slots(
    layers: &[Vec<Var>],
    taps: &Taps,
) -> Option<(Vec<Vec<Range<usize>>>, usize)> {
    let params = taps.params();
    let mut places = Vec::with_capacity(params.len());
    let mut offset = 0;
    for p in &params {
        let n = p.var.as_tensor().elem_count();
        places.push((p.var.as_tensor().id(), offset..offset + n, p.owner.clone()));
        offset += n;
    }
    if params.len() != layers.iter().map(Vec::len).sum::<usize>() {
        return None;
    }
    let mut owners: Vec<&String> = Vec::with_capacity(layers.len());
    let mut slots = Vec::with_capacity(layers.len());
    for vars in layers {
        let mut layer_owner: Option<&String> = None;
        let mut ranges = Vec::with_capacity(vars.len());
        for var in vars {
            let id = var.as_tensor().id();
            let (_, range, owner) = places.iter().find(|(i, ..)| *i == id)?;
            if layer_owner.is_some_and(|o| o != owner) || owners.contains(&owner) {
                return None;
            }
            layer_owner = Some(owner);
            ranges.push(range.clone());
        }
        owners.extend(layer_owner);
        slots.push(ranges);
    }
    Some((slots, offset))
}

/// What a planned route checks before a private step: fail-closed as the general path
/// (every variable of the taps' maps is a DP layer's), and the taps' parameters still
/// the ones it was planned for.
pub(crate) fn check_step(taps: &Taps, num_params: usize, tensors: usize) -> Result<()> {
    for varmap in taps.varmaps() {
        taps.check_covers(&varmap)?;
    }
    check_unchanged(taps, num_params, tensors)
}

/// Fails closed where the taps' parameters are no longer the ones a route was planned
/// for (a layer registered after the model was built would get no clipped gradient from
/// it, and the flat sums would not match θ).
pub(crate) fn check_unchanged(taps: &Taps, num_params: usize, tensors: usize) -> Result<()> {
    if taps.num_params() != num_params || taps.params().len() != tensors {
        return Err(Error::invalid_model(
            "executor",
            format!(
                "the taps hold {} parameters in {} tensors, the executor was planned for {num_params} in {tensors}: build the model again after adding layers",
                taps.num_params(),
                taps.params().len()
            ),
        ));
    }
    Ok(())
}
