//! DP layers for any Candle model: drop-ins for candle-nn's layers (`impl Module`,
//! constructors taking a [`DpVarBuilder`]) whose per-sample gradients come from taps on
//! their outputs, so that the ops between them can be any Candle op with a backward —
//! residual additions, attention, GELU, dropout, weight tying, a layer applied at every
//! step of a sequence.
//!
//! ```no_run
//! use candle_core::{Device, Module, Tensor};
//! use candle_nn::VarMap;
//! use dp_models::nn::{self, DpVarBuilder, NormMethod, Taps};
//! use dp_models::ClipRule;
//!
//! # fn main() -> dp_models::Result<()> {
//! let (varmap, taps, device) = (VarMap::new(), Taps::new(), Device::Cpu);
//! let vb = DpVarBuilder::from_varmap(&varmap, &taps, &device);
//! let (fc1, fc2) = (nn::linear(3, 16, vb.pp("fc1"))?, nn::linear(16, 1, vb.pp("fc2"))?);
//! let x = Tensor::randn(0f32, 1.0, (8, 3), &device)?;
//! let y = Tensor::randn(0f32, 1.0, (8, 1), &device)?;
//! let grads = taps.clipped_gradients(
//!     || Ok(nn::loss::mse(&fc2.forward(&fc1.forward(&x)?.gelu()?)?, &y)?),
//!     ClipRule::Flat { max_grad_norm: 1.0 },
//!     NormMethod::Auto,
//! )?;
//! # Ok(()) }
//! ```
//!
//! * [`Taps`] — a network's registry of DP parameters and the recorder of a private
//!   forward; [`Taps::clipped_gradients`] is the private backward (fail-closed).
//! * Layers, one per file: [`Linear`], [`Embedding`], [`Conv1d`], [`Conv2d`],
//!   [`LayerNorm`], [`RmsNorm`], [`GroupNorm`]; a layer of one's own taps its output with
//!   [`Taps::tap`] and describes its per-sample gradients as [`Contribution`]s.
//! * [`MultiHeadAttention`], [`Transformer`] — attention and a pre-LN transformer
//!   (encoder or causal decoder) from these layers.
//! * [`ops`] — differentiable replacements for candle-nn's fused ops without a backward.
//! * [`loss`] — per-example losses (cross-entropy with ignore index, next-token, MSE, BCE).
//! * [`Sequential`] — DP layers in order; on the CPU a stack the fused executor runs
//!   trains on it without naming it.
//! * [`StateDict`] — public weights from a PyTorch `state_dict` (safetensors) by name.
//! * [`ModuleClassifier`] — a module of DP layers as a classifier on a labelled dataset,
//!   trained on the fastest [`Executor`] that covers it.
//! * [`PrivateNet`] — a network and its loss closure as a [`PrivateModel`](crate::PrivateModel)
//!   for the DP engine.

mod attention;
mod batch_axis;
mod classifier;
mod contribution;
mod conv1d;
mod conv2d;
mod embedding;
mod executor;
mod flat;
mod freeze;
mod fused_route;
mod ghost;
mod gradients;
mod group_norm;
mod layer_norm;
mod left_factor;
mod linear;
mod lora;
pub mod loss;
pub mod ops;
mod private_net;
mod probe;
mod rms_norm;
mod route_taps;
mod scale_shift;
mod sequential;
mod staged_route;
mod state_dict;
mod taps;
mod transformer;
mod unfold;
mod var_builder;

pub use crate::fused::Flops;
pub use attention::MultiHeadAttention;
pub use classifier::ModuleClassifier;
pub(crate) use contribution::{clipped_sum, per_sample, squared_norms};
pub use contribution::{Contribution, NormMethod};
pub use conv1d::{conv1d, Conv1d};
pub use conv2d::{conv2d, Conv2d};
pub use embedding::{embedding, Embedding};
pub use executor::Executor;
pub use group_norm::{group_norm, GroupNorm};
pub use layer_norm::{layer_norm, LayerNorm};
pub use left_factor::Left;
pub(crate) use linear::contributions as linear_contributions;
pub use linear::{linear, linear_no_bias, Linear};
pub use lora::{add_lora, LinearLayers, LoraConfig};
pub use private_net::PrivateNet;
pub use rms_norm::{rms_norm, RmsNorm};
pub use sequential::Sequential;
pub use state_dict::{Loaded, StateDict};
pub use taps::{Param, Resolve, Taps};
pub use transformer::{Transformer, TransformerConfig};
pub use var_builder::DpVarBuilder;
