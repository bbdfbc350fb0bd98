//! The DP fully connected layer, a drop-in for `candle_nn::Linear`.

use candle_core::{Module, Tensor, Var};
use candle_nn::Init;

use super::contribution::Contribution;
use super::left_factor::Left;
use super::ops;
use super::taps::Taps;
use super::var_builder::DpVarBuilder;
use crate::cpu;
use crate::error::{Error, Result};

/// `y = x Wᵀ + b` on (B, …, in), batch first. Its per-sample gradients are
/// `Σₖ gₖ ⊗ aₖ` over all positions of an example (and every use of the layer in one
/// forward: a layer applied at each step of a sequence contributes each step).
#[derive(Clone, Debug)]
pub struct Linear {
    weight: Var,
    bias: Option<Var>,
    taps: Taps,
    /// A LoRA adapter added to the output ([`Linear::with_lora`]).
    adapter: Option<Box<Adapter>>,
}

/// A Linear layer with bias, initialised as candle-nn's (`weight` Kaiming-normal,
/// `bias` uniform in ±1/√in).
pub fn linear(in_dim: usize, out_dim: usize, vb: DpVarBuilder) -> Result<Linear> {
    let weight = vb.get_with_hints(
        (out_dim, in_dim),
        "weight",
        candle_nn::init::DEFAULT_KAIMING_NORMAL,
    )?;
    let bound = 1.0 / (in_dim as f64).sqrt();
    let bias = vb.get_with_hints(
        out_dim,
        "bias",
        Init::Uniform {
            lo: -bound,
            up: bound,
        },
    )?;
    Linear::from_vars(weight, Some(bias), vb.taps())
}

/// A Linear layer without bias.
pub fn linear_no_bias(in_dim: usize, out_dim: usize, vb: DpVarBuilder) -> Result<Linear> {
    let weight = vb.get_with_hints(
        (out_dim, in_dim),
        "weight",
        candle_nn::init::DEFAULT_KAIMING_NORMAL,
    )?;
    Linear::from_vars(weight, None, vb.taps())
}

/// The two factors of one LoRA adapter (built by [`Linear::with_lora`], nn/lora.rs).
#[derive(Clone, Debug)]
pub(super) struct Adapter {
    /// `A` (r × in), Kaiming-initialised.
    down: Linear,
    /// `B` (out × r), zero at the start, so the adapted layer starts as the base.
    up: Linear,
    scale: f64,
}

impl Adapter {
    /// `(α/r)·B(Ax)` from `A`, `B` and α/r.
    pub(super) fn new(down: Linear, up: Linear, scale: f64) -> Adapter {
        Adapter { down, up, scale }
    }

    /// `(α/r)·B(Ax)`.
    pub(super) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.up.forward(&self.down.forward(x)?)? * self.scale
    }

    /// `A` and `B`.
    pub(super) fn factors(&self) -> (&Linear, &Linear) {
        (&self.down, &self.up)
    }
}

impl Linear {
    /// From parameters already registered with `taps` — e.g. an embedding's table for an
    /// LM head that shares it (weight tying): the layer's per-sample gradients add to the
    /// embedding's.
    pub fn from_vars(weight: Var, bias: Option<Var>, taps: &Taps) -> Result<Self> {
        let (out, _) = weight.as_tensor().dims2()?;
        if let Some(b) = &bias {
            if b.as_tensor().dims1()? != out {
                return Err(Error::invalid_model(
                    "Linear",
                    "the bias does not match the weight",
                ));
            }
        }
        for var in std::iter::once(&weight).chain(bias.as_ref()) {
            if !taps.is_registered(var) {
                return Err(Error::invalid_model(
                    "Linear",
                    "its parameters must be created through a DpVarBuilder of the same taps",
                ));
            }
        }
        Ok(Linear {
            weight,
            bias,
            taps: taps.clone(),
            adapter: None,
        })
    }

    /// This layer with `adapter` added to its output.
    pub(super) fn adapted(mut self, adapter: Adapter) -> Linear {
        self.adapter = Some(Box::new(adapter));
        self
    }

    /// The adapter, if any.
    pub(super) fn adapter(&self) -> Option<&Adapter> {
        self.adapter.as_deref()
    }

    /// The LoRA factors `A` (r × in) and `B` (out × r), if the layer has an adapter.
    pub fn lora_factors(&self) -> Option<(&Linear, &Linear)> {
        self.adapter().map(Adapter::factors)
    }

    /// The weight (out, in).
    pub fn weight(&self) -> &Var {
        &self.weight
    }

    /// The bias, if any.
    pub fn bias(&self) -> Option<&Var> {
        self.bias.as_ref()
    }
}

/// `x Wᵀ + b` on (…, in). On the CPU it is one op ([`cpu::Linear`], or [`cpu::Matmul`]
/// without a bias) on every leading axis at once (no reshape nodes), with the
/// parameters' gradients only where they train: with
/// `constant_weight` (a private forward) Candle's matmul would also compute the weight's
/// summed gradient, a gemm as large as the forward, that a private step never uses.
/// Elsewhere `x` is flattened to rows, so that the weight is one 2-D matmul (no
/// per-example broadcast copies of it in Candle's backward). With `catch`, the last CPU
/// op keeps the output's gradient in it; the flag says whether it does (the output is in
/// Candle's graph and ends in such an op).
///
/// With an `activation`, the CPU op with a bias also applies it (one node instead of two);
/// [`Affine::activated`] says whether it did.
fn affine(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    constant_weight: bool,
    catch: Option<&cpu::GradientSlot>,
    activation: Option<cpu::Gelu>,
) -> candle_core::Result<Affine> {
    // A constant weight on data (a first layer) is outside Candle's graph either way.
    let on_cpu = cpu::applies(x) && (!constant_weight || x.track_op());
    // Matmul and bias in one op: one node of Candle's graph, one pass over the output.
    if let Some(b) = b.filter(|b| on_cpu && cpu::applies(b)) {
        let op = cpu::Linear::new(!constant_weight, catch.cloned(), activation);
        let y = x
            .contiguous()?
            .apply_op3(&w.contiguous()?, &b.contiguous()?, op)?;
        let caught = y.track_op() && catch.is_some();
        return Ok(Affine {
            y,
            caught,
            activated: activation.is_some(),
        });
    }
    let y = if on_cpu {
        let op = cpu::Matmul {
            catch: catch.filter(|_| b.is_none()).cloned(),
            ..cpu::Matmul::linear(!constant_weight)
        };
        x.contiguous()?.apply_op2(&w.contiguous()?, op)?
    } else {
        let mut dims = x.dims().to_vec();
        let rows = x
            .reshape(((), x.dim(candle_core::D::Minus1)?))?
            .matmul(&w.t()?)?;
        if let Some(last) = dims.last_mut() {
            *last = w.dim(0)?;
        }
        rows.reshape(dims)?
    };
    // Only an output in Candle's graph has a backward to catch its gradient.
    let tracked = y.track_op() && catch.is_some();
    let (y, caught) = match b {
        // The bias on the CPU: the input's gradient passes as it is, and a trainable
        // bias's is one pass of column sums.
        Some(b) if cpu::applies(&y) => {
            let op = cpu::AddBias {
                bias_gradient: !constant_weight,
                catch: catch.filter(|_| tracked).cloned(),
            };
            (y.contiguous()?.apply_op2(&b.contiguous()?, op)?, tracked)
        }
        Some(b) => (y.broadcast_add(b)?, false),
        None => (y, on_cpu && tracked),
    };
    Ok(Affine {
        y,
        caught,
        activated: false,
    })
}

/// `residual + x wᵀ + b` by [`cpu::LinearResidual`], the bias packed as the weight's last
/// column.
fn apply_residual(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    residual: &Tensor,
    op: cpu::LinearResidual,
) -> candle_core::Result<Tensor> {
    let wb = match b {
        Some(b) => Tensor::cat(&[w, &b.unsqueeze(1)?], 1)?,
        None => w.contiguous()?,
    };
    x.contiguous()?.apply_op3(&wb, &residual.contiguous()?, op)
}

/// What [`affine`] gives.
struct Affine {
    /// The output.
    y: Tensor,
    /// Whether the last op keeps the gradient of `x Wᵀ + b` (the output is in Candle's graph
    /// and ends in such an op).
    caught: bool,
    /// Whether the activation asked for is applied.
    activated: bool,
}

/// `y`, with `activation` applied unless `activated` says it is.
fn activate(
    y: Tensor,
    activation: Option<cpu::Gelu>,
    activated: bool,
) -> candle_core::Result<Tensor> {
    match activation {
        Some(_) if activated => Ok(y),
        Some(cpu::Gelu { exact: true }) => ops::gelu_erf(&y),
        Some(cpu::Gelu { exact: false }) => ops::gelu(&y),
        None => Ok(y),
    }
}

/// The per-sample gradient rule of a Linear layer, the one every executor uses: for the
/// output gradients `grad` (B, …, out) of one use on `input` (B, …, in), the weight's
/// `Σₖ gₖ ⊗ aₖ` and the bias's `Σₖ gₖ`.
pub(crate) fn contributions(
    weight: &Var,
    bias: Option<&Var>,
    input: &Tensor,
    grad: &Tensor,
) -> Result<Vec<(Var, Contribution)>> {
    let batch = grad.dim(0)?;
    let out = weight.as_tensor().dim(0)?;
    let left = grad.reshape((batch, (), out))?;
    let right = input.reshape((batch, (), input.dim(candle_core::D::Minus1)?))?;
    // The bias's per-sample gradients are the summed output gradients: (B, out), as small
    // as the parameter, so materialised.
    let bias = match bias {
        Some(b) => Some((b.clone(), Contribution::PerSample(sum_positions(&left)?))),
        None => None,
    };
    let weight_contribution = Contribution::Outer {
        left: Left::Dense(left),
        right,
    };
    Ok(std::iter::once((weight.clone(), weight_contribution))
        .chain(bias)
        .collect())
}

/// (B, K, out) → (B, out): each example's output gradients summed over its positions.
fn sum_positions(left: &Tensor) -> candle_core::Result<Tensor> {
    if cpu::applies(left) {
        cpu::row_sums(left)
    } else {
        left.sum(1)
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let y = self.base_forward(x, None)?;
        match self.adapter() {
            Some(adapter) => y + adapter.forward(x)?,
            None => Ok(y),
        }
    }
}

impl Linear {
    /// `GELU(x Wᵀ + b)` with the tanh approximation: [`ops::gelu`] of the layer's output,
    /// in one op on the CPU (a transformer's MLP; one node of Candle's graph fewer).
    pub fn forward_gelu(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_activated(x, cpu::Gelu { exact: false })
    }

    /// `GELU(x Wᵀ + b)`, exact: [`ops::gelu_erf`] of the layer's output, in one op on the
    /// CPU.
    pub fn forward_gelu_erf(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_activated(x, cpu::Gelu { exact: true })
    }

    /// `residual + x Wᵀ + b` (a transformer block's output projection and its residual
    /// addition), in one op on the CPU: one node of Candle's graph fewer, so one pass over
    /// the residual stream fewer and no zero tensor and addition for the projection's
    /// output (the op reads the weight and bias packed as one tensor, a copy of the
    /// parameter's size per call).
    pub fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        let on_cpu = cpu::applies(x) && cpu::applies(residual);
        if self.adapter().is_some() || !on_cpu || x.rank() != residual.rank() {
            return residual + self.forward(x)?;
        }
        let vars: Vec<&Var> = std::iter::once(&self.weight).chain(&self.bias).collect();
        if !self.taps.records(&vars) {
            let constant = vars.iter().all(|v| self.taps.is_frozen(v));
            let w = self.taps.live(&self.weight);
            let b = self.bias.as_ref().map(|b| self.taps.live(b));
            let op = cpu::LinearResidual {
                parameter_gradients: !constant,
                catch: None,
                bias: b.is_some(),
            };
            return apply_residual(x, &w, b.as_ref(), residual, op);
        }
        // In a private forward the op's backward must run (its output in the graph) to
        // leave the gradient of x Wᵀ + b for the tap; otherwise a probe records it.
        if !(x.track_op() || residual.track_op()) {
            return residual + self.forward(x)?;
        }
        let (w, b) = (
            self.weight.as_tensor().detach(),
            self.bias.as_ref().map(|b| b.as_tensor().detach()),
        );
        let slot = cpu::GradientSlot::default();
        let op = cpu::LinearResidual {
            parameter_gradients: false,
            catch: Some(slot.clone()),
            bias: b.is_some(),
        };
        let y = apply_residual(x, &w, b.as_ref(), residual, op)?;
        let (weight, bias, input) = (self.weight.clone(), self.bias.clone(), x.detach());
        let resolve = move |grad: &Tensor| contributions(&weight, bias.as_ref(), &input, grad);
        Ok(self.taps.tap_caught(y, slot, resolve))
    }

    fn forward_activated(&self, x: &Tensor, gelu: cpu::Gelu) -> candle_core::Result<Tensor> {
        if self.adapter().is_some() {
            return activate(self.forward(x)?, Some(gelu), false);
        }
        self.base_forward(x, Some(gelu))
    }

    /// `x Wᵀ + b`, then `activation`; tapped in a private forward unless every parameter
    /// is frozen (the taps see the gradient of `x Wᵀ + b`).
    fn base_forward(
        &self,
        x: &Tensor,
        activation: Option<cpu::Gelu>,
    ) -> candle_core::Result<Tensor> {
        let vars: Vec<&Var> = std::iter::once(&self.weight).chain(&self.bias).collect();
        if !self.taps.records(&vars) {
            let constant = vars.iter().all(|v| self.taps.is_frozen(v));
            let w = self.taps.live(&self.weight);
            let b = self.bias.as_ref().map(|b| self.taps.live(b));
            let out = affine(x, &w, b.as_ref(), constant, None, activation)?;
            return activate(out.y, activation, out.activated);
        }
        let w = self.weight.as_tensor().detach();
        let b = self.bias.as_ref().map(|b| b.as_tensor().detach());
        let slot = cpu::GradientSlot::default();
        // Fused only where the op's backward runs (x in the graph): there it leaves the
        // gradient of x Wᵀ + b in the slot; otherwise a probe on x Wᵀ + b records it.
        let fused = activation.filter(|_| x.track_op());
        let out = affine(x, &w, b.as_ref(), true, Some(&slot), fused)?;
        // An activated output is caught (x is in the graph), so no probe lands on GELU(z).
        debug_assert!(!out.activated || out.caught);
        let (weight, bias, input) = (self.weight.clone(), self.bias.clone(), x.detach());
        let resolve = move |grad: &Tensor| contributions(&weight, bias.as_ref(), &input, grad);
        let y = if out.caught {
            self.taps.tap_caught(out.y, slot, resolve)
        } else {
            self.taps.tap(out.y, resolve)?
        };
        activate(y, activation, out.activated)
    }
}
