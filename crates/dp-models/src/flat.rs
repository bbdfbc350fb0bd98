//! Tensors as one flat host vector, and back: how parameters, clipped sums and optimizer
//! moments cross between the engine's flat vectors and a model's tensors.

use candle_core::{Tensor, Var};

use crate::error::{Error, Result};

/// The tensors' values concatenated, in order, on the host.
pub fn flatten<'a>(tensors: impl IntoIterator<Item = &'a Tensor>) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for t in tensors {
        out.extend(t.flatten_all()?.to_vec1::<f32>()?);
    }
    Ok(out)
}

/// `flat` split into tensors of the shapes and devices of `like`, in order; an error
/// unless the lengths add up exactly.
pub fn unflatten(flat: &[f32], like: &[Tensor]) -> Result<Vec<Tensor>> {
    let expected: usize = like.iter().map(Tensor::elem_count).sum();
    if flat.len() != expected {
        return Err(Error::invalid_model(
            "parameters",
            format!("{} values for {expected} parameters", flat.len()),
        ));
    }
    let mut offset = 0;
    like.iter()
        .map(|t| {
            let n = t.elem_count();
            let part = Tensor::from_slice(&flat[offset..offset + n], t.shape(), t.device())?;
            offset += n;
            Ok(part)
        })
        .collect()
}

/// Sets `vars`, in order, from one flat vector (an error unless the lengths add up).
pub fn set_vars(vars: &[Var], flat: &[f32]) -> Result<()> {
    let like: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    for (var, value) in vars.iter().zip(unflatten(flat, &like)?) {
        var.set(&value)?;
    }
    Ok(())
}
