//! The variable builder of DP layers: candle-nn's `VarBuilder` over a `VarMap`, which also
//! registers every parameter it creates with the network's [`Taps`].

use candle_core::{DType, Device, Shape, Var};
use candle_nn::{Init, VarMap};

use super::taps::Taps;
use crate::error::{Error, Result};

/// Creates (or fetches) a network's parameters in a `VarMap`, under a dotted path, and
/// registers each with the network's [`Taps`] as owned by the layer at that path.
#[derive(Clone)]
pub struct DpVarBuilder {
    varmap: VarMap,
    taps: Taps,
    path: Vec<String>,
    dtype: DType,
    device: Device,
}

impl DpVarBuilder {
    /// A builder over `varmap` whose layers record into `taps`. Only `F32` is supported.
    pub fn from_varmap(varmap: &VarMap, taps: &Taps, device: &Device) -> Self {
        taps.watch(varmap);
        DpVarBuilder {
            varmap: varmap.clone(),
            taps: taps.clone(),
            path: Vec::new(),
            dtype: DType::F32,
            device: device.clone(),
        }
    }

    /// The builder one level down: `vb.pp("attn")`.
    pub fn pp(&self, name: impl ToString) -> Self {
        let mut vb = self.clone();
        vb.path.push(name.to_string());
        vb
    }

    /// The taps the layers built from here record into.
    pub fn taps(&self) -> &Taps {
        &self.taps
    }

    /// The device parameters are created on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The current path (`blocks.0.attn`): the owner of the parameters created here.
    pub fn prefix(&self) -> String {
        self.path.join(".")
    }

    /// The parameter `name` of `shape` (created with `init` if missing), registered as
    /// owned by this builder's layer.
    pub fn get_with_hints(&self, shape: impl Into<Shape>, name: &str, init: Init) -> Result<Var> {
        let owner = self.prefix();
        let full = if owner.is_empty() {
            name.to_string()
        } else {
            format!("{owner}.{name}")
        };
        self.varmap
            .get(shape, &full, init, self.dtype, &self.device)?;
        let var = self
            .varmap
            .data()
            .lock()
            .map_err(|_| Error::invalid_model("DP layer", "the VarMap's lock is poisoned"))?
            .get(&full)
            .cloned()
            .ok_or_else(|| {
                Error::invalid_model("DP layer", format!("{full} missing from its VarMap"))
            })?;
        self.taps.register(&full, &owner, var.clone())?;
        Ok(var)
    }
}

impl Taps {
    /// Fails closed unless every variable of `varmap` was created by a DP layer of these
    /// taps: a plain `candle_nn::Linear` (or any other use of the map) would be trained
    /// without clipping. The error names the first uncovered parameter.
    pub fn check_covers(&self, varmap: &VarMap) -> Result<()> {
        let data = varmap
            .data()
            .lock()
            .map_err(|_| Error::invalid_model("DP layer", "the VarMap's lock is poisoned"))?;
        let mut names: Vec<&String> = data.keys().collect();
        names.sort();
        for name in names {
            if !self.is_registered(&data[name]) {
                return Err(Error::UnprotectedParameter {
                    parameter: name.clone(),
                    reason: "is not covered by a DP layer (create it through a DpVarBuilder layer)",
                });
            }
        }
        Ok(())
    }
}
