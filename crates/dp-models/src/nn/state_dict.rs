//! Public weights onto a network of DP layers: a PyTorch `state_dict` saved as
//! safetensors (`safetensors.torch.save_file(model.state_dict(), "model.safetensors")`).
//!
//! The DP layers store their parameters in PyTorch's layouts under PyTorch's names
//! (`weight` and `bias`; Linear `(out, in)`, Conv2d `(out, in, k, k)`, Embedding
//! `(num, dim)`), so a module tree named as in PyTorch loads by name; [`StateDict::rename`]
//! maps the rest (a learned position table held as an `nn.Parameter`, say, onto the
//! `weight` of the Embedding over `0..T` that stands for it). Values are converted to
//! each variable's dtype (f64 → f32) and device; every shape must match.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use candle_core::{Device, Tensor};
use candle_nn::VarMap;

use crate::error::{Error, Result};

/// Named tensors to load, as read from a file.
#[derive(Clone, Debug, Default)]
pub struct StateDict {
    tensors: BTreeMap<String, Tensor>,
}

/// What [`StateDict::load_into`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The variables set, by name.
    pub loaded: Vec<String>,
    /// The model's variables that the state dict does not hold (left as they were).
    pub missing: Vec<String>,
    /// The state dict's tensors that are no variable of the model (buffers such as
    /// BatchNorm's running statistics, or a head the model does not have).
    pub unexpected: Vec<String>,
}

impl StateDict {
    /// Reads a safetensors file.
    pub fn read(path: &Path) -> Result<Self> {
        let tensors =
            candle_core::safetensors::load(path, &Device::Cpu).map_err(|e| Error::CorruptFile {
                path: path.to_path_buf(),
                reason: format!("not a readable safetensors state dict: {e}"),
            })?;
        Ok(StateDict {
            tensors: tensors.into_iter().collect(),
        })
    }

    /// Writes the tensors as a safetensors file, which PyTorch reads with
    /// `safetensors.torch.load_file(path)` (and [`read`](Self::read) reads back).
    pub fn write(&self, path: &Path) -> Result<()> {
        let tensors: std::collections::HashMap<&str, Tensor> = self
            .tensors
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        candle_core::safetensors::save(&tensors, path)?;
        Ok(())
    }

    /// From tensors already in memory.
    pub fn from_tensors(tensors: impl IntoIterator<Item = (String, Tensor)>) -> Self {
        StateDict {
            tensors: tensors.into_iter().collect(),
        }
    }

    /// Renames each tensor by `map` (its new name, or `None` to drop it).
    pub fn rename(self, map: impl Fn(&str) -> Option<String>) -> Self {
        let tensors = self
            .tensors
            .into_iter()
            .filter_map(|(name, t)| map(&name).map(|n| (n, t)))
            .collect();
        StateDict { tensors }
    }

    /// The tensors' names.
    pub fn names(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    /// Sets every variable of `varmap` that the state dict names. With `strict` (as
    /// PyTorch's `load_state_dict`), a missing variable or an unexpected tensor is an
    /// error naming it and nothing is set; a shape that differs is always one.
    pub fn load_into(&self, varmap: &VarMap, strict: bool) -> Result<Loaded> {
        let vars = varmap.data().lock().map_err(|_| poisoned())?.clone();
        let names: BTreeSet<&String> = vars.keys().collect();
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !self.tensors.contains_key(n.as_str()))
            .map(|n| n.to_string())
            .collect();
        let unexpected: Vec<String> = self
            .tensors
            .keys()
            .filter(|n| !names.contains(n))
            .cloned()
            .collect();
        if strict && !(missing.is_empty() && unexpected.is_empty()) {
            return Err(Error::invalid_model(
                "state dict",
                format!(
                    "missing {}, unexpected {} (load with strict = false to skip them)",
                    list(&missing),
                    list(&unexpected)
                ),
            ));
        }
        let mut converted = Vec::new();
        for (name, var) in &vars {
            let Some(t) = self.tensors.get(name) else {
                continue;
            };
            if t.dims() != var.dims() {
                return Err(Error::invalid_model(
                    "state dict",
                    format!(
                        "{name} has shape {:?} in the state dict and {:?} in the model",
                        t.dims(),
                        var.dims()
                    ),
                ));
            }
            converted.push((name, var, t.to_dtype(var.dtype())?.to_device(var.device())?));
        }
        let mut loaded = Vec::with_capacity(converted.len());
        for (name, var, value) in converted {
            var.set(&value)?;
            loaded.push(name.clone());
        }
        Ok(Loaded {
            loaded,
            missing,
            unexpected,
        })
    }
}

fn poisoned() -> Error {
    Error::invalid_model("state dict", "the VarMap's lock is poisoned")
}

/// The first few names, and how many in all.
fn list(names: &[String]) -> String {
    match names.len() {
        0 => "none".into(),
        n if n <= 4 => names.join(", "),
        n => format!("{}, … ({n} in all)", names[..4].join(", ")),
    }
}
