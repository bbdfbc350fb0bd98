//! Frozen (public) parameters: a layer or a whole sub-network whose parameters take part
//! in the forward as constants and are never clipped, noised or updated — a public
//! pretrained backbone under private fine-tuning, or the base weights under LoRA.
//!
//! Privacy: a frozen parameter is data-independent during training (it is never
//! updated from private data), so the released updates are those of the DP-SGD
//! mechanism on the trainable parameters alone, with the frozen values as public
//! constants of the model — post-processing leaves ε unchanged (Dwork & Roth, *The
//! Algorithmic Foundations of Differential Privacy*, Prop. 2.1). Values loaded from
//! public data are public; values that came from private data are not, and freezing does
//! not make them so.

use candle_core::{Tensor, Var};

use super::taps::Taps;
use crate::error::{Error, Result};

impl Taps {
    /// Freezes every trainable parameter named `prefix` or under it (`"encoder"` freezes
    /// `encoder.blocks.0.attn.q.weight`, not `encoder2.…`; `""` freezes all) and returns
    /// how many it froze. Freeze before the model is handed to an engine: a model whose
    /// trainable parameters change after that is refused at its next step.
    pub fn freeze(&self, prefix: &str) -> Result<usize> {
        let under = |name: &str| {
            prefix.is_empty()
                || name == prefix
                || name
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('.'))
        };
        match self.freeze_where(|p| under(&p.name))? {
            0 => Err(Error::invalid_model(
                "freeze",
                format!("no trainable parameter is named {prefix:?} or under it"),
            )),
            n => Ok(n),
        }
    }

    /// Whether a layer with parameters `vars` takes part in this forward as a DP layer
    /// (taps its output): a private forward is being recorded and at least one of them
    /// trains. A layer whose parameters are all frozen runs as a constant function.
    pub fn records(&self, vars: &[&Var]) -> bool {
        self.is_recording() && vars.iter().any(|v| !self.is_frozen(v))
    }

    /// `var` as a layer's forward outside a recording uses it: the variable itself where
    /// it trains (Candle computes its gradient), a constant where it is frozen (no
    /// gradient is computed for it).
    pub fn live(&self, var: &Var) -> Tensor {
        if self.is_frozen(var) {
            var.as_tensor().detach()
        } else {
            var.as_tensor().clone()
        }
    }
}
