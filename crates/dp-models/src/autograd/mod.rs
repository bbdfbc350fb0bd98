//! The autograd tier: layers outside the fused vocabulary (Embedding, Linear over
//! sequences, …) built from Candle ops, with per-sample gradients through probe taps.
//!
//! In DP mode each parametric layer uses its weights as constants (detached) and adds a
//! zero "probe" `Var` to its output; one backward of the summed per-example loss then
//! gives every layer's `dL/dz` per example, from which the layer computes per-sample
//! squared norms, the clipped sum `Σᵢ cᵢ∇ᵢ` (book-keeping: one matmul, no per-sample
//! tensors) and, for tests, materialised per-sample gradients. Candle's summed weight
//! gradients are never used, so nothing unclipped can reach an optimizer. This tier runs
//! on any Candle device, CUDA included (with the `cuda` feature).

use std::sync::OnceLock;

use candle_core::{DType, Device, Tensor, TensorId, Var, D};

use crate::error::{Error, Result};
use crate::ClipRule;

use crate::cpu::{
    self, Conv, ConvClippedSum, ConvPerSampleRows, Matmul, MaxPool, Tanh, Unfold, WeightedRowSum,
};

/// Default most floats of per-sample conv gradients kept between the norm and clipped-sum
/// passes (128 MiB); larger layers recompute them sample by sample instead.
pub const DEFAULT_KEPT_ROWS_LIMIT: usize = 32 << 20;

/// One tap of the forward: the layer's (detached) input and its output probe.
#[derive(Debug)]
pub struct TapeEntry {
    /// Index of the layer in the model.
    pub layer: usize,
    /// The layer's input, detached.
    pub input: Tensor,
    /// The zero `Var` added to the layer's output for Candle's backward to fill; `None` in
    /// the direct backward, which hands each layer its output gradient itself.
    pub probe: Option<Var>,
    /// Whether the layer may use the CPU custom ops on this entry (not in portable mode).
    pub cpu_ops: bool,
    /// Per-sample gradient rows a layer's norm pass materialised for its clipped sum, keyed
    /// by the output gradient they came from (a different gradient misses the cache).
    per_sample_rows: OnceLock<(TensorId, Tensor)>,
    /// Most floats of per-sample rows a layer may keep for this entry.
    rows_limit: usize,
}

impl TapeEntry {
    fn keep_rows(&self, grad_out: &Tensor, rows: Tensor) {
        // Set once per tap; a second norm pass on the same tap recomputes the same rows.
        let _ = self.per_sample_rows.set((grad_out.id(), rows));
    }

    fn rows_for(&self, grad_out: &Tensor) -> Option<&Tensor> {
        match self.per_sample_rows.get() {
            Some((id, rows)) if *id == grad_out.id() => Some(rows),
            _ => None,
        }
    }
}

/// The taps of one forward.
#[derive(Debug, Default)]
pub struct Tape {
    /// Entries in forward order.
    pub entries: Vec<TapeEntry>,
    /// Use Candle's own ops only, as on CUDA, even where the CPU ops apply.
    pub portable: bool,
    /// Direct backward: no probes; the model records each stage's input and walks the
    /// stages in reverse itself instead of running Candle's backward.
    pub direct: bool,
    /// With `direct`: the input of every stage, in order.
    pub stage_inputs: Vec<Tensor>,
    /// Most floats of per-sample gradients a layer keeps between its norm and clipped-sum
    /// passes (0 keeps none).
    pub rows_limit: usize,
}

impl Tape {
    /// Whether the layers may use the CPU custom ops on `t`.
    pub fn cpu_ops_apply(&self, t: &Tensor) -> bool {
        !self.portable && cpu::applies(t)
    }
}

/// The per-sample-gradient protocol every DP layer implements.
pub trait DpLayer: Send + Sync {
    /// Forward; in DP mode (`tape` given) weights are constants and a probe is recorded.
    fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor>;
    /// The trainable parameters, in a fixed order.
    fn vars(&self) -> Vec<Var>;
    /// `‖∇θ ℓᵢ‖²` of this layer's parameters, per example (B,).
    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor>;
    /// `Σᵢ cᵢ ∇θ ℓᵢ` for each of `vars()`, in order.
    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>>;
    /// Materialised per-sample gradients, one (B, …) tensor per var (tests, audits).
    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>>;
    /// Whether [`DpLayer::input_gradient`] is implemented on the CPU ops, so that a model of
    /// such layers can run the direct backward (no Candle graph).
    fn has_input_gradient(&self) -> bool {
        false
    }
    /// `dL/dx` from `dL/dz` (weights constant), for the direct backward.
    fn input_gradient(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        let _ = (entry, grad_out);
        Err(Error::InvalidModel(
            "this layer has no direct input gradient".into(),
        ))
    }
    /// Whether the layer reads integer token ids (datasets store them as floats; the model
    /// converts).
    fn takes_token_ids(&self) -> bool {
        false
    }
}

/// Adds a zero probe to a layer's output `z` and records the tap (input kept as given:
/// callers pass it detached or, for token ids, as is).
fn tap(z: Tensor, input: Tensor, tape: &mut Tape, layer: usize) -> Result<Tensor> {
    let (z, probe) = if tape.direct {
        (z, None)
    } else {
        let probe = Var::zeros(z.shape(), DType::F32, z.device())?;
        ((z + probe.as_tensor())?, Some(probe))
    };
    let cpu_ops = tape.cpu_ops_apply(&input);
    tape.entries.push(TapeEntry {
        layer,
        input,
        probe,
        cpu_ops,
        per_sample_rows: OnceLock::new(),
        rows_limit: tape.rows_limit,
    });
    Ok(z)
}

/// `‖∇W‖² + ‖∇b‖²` per example from materialised (B, …) weight and (B, out) bias grads.
fn materialised_squared_norms(per_sample: &[Tensor]) -> Result<Tensor> {
    Ok((per_sample[0].sqr()?.flatten_from(1)?.sum(1)? + per_sample[1].sqr()?.sum(1)?)?)
}

/// Fully connected layer with bias, on (B, in) or on sequences (B, T, in).
pub struct DpLinear {
    weight: Var,
    bias: Var,
}

impl DpLinear {
    /// From a weight (out, in) and a bias (out).
    pub fn new(weight: Tensor, bias: Tensor) -> Result<Self> {
        let (out, _) = weight.dims2()?;
        if bias.dims1()? != out {
            return Err(Error::InvalidModel(
                "linear bias does not match the weight".into(),
            ));
        }
        Ok(DpLinear {
            weight: Var::from_tensor(&weight)?,
            bias: Var::from_tensor(&bias)?,
        })
    }

    /// Treats (B, in) as (B, 1, in) so one code path serves both.
    fn as_sequence(t: &Tensor) -> Result<Tensor> {
        Ok(if t.rank() == 2 {
            t.unsqueeze(1)?
        } else {
            t.clone()
        })
    }
}

impl DpLayer for DpLinear {
    fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor> {
        match tape {
            None => Ok(x
                .broadcast_matmul(&self.weight.as_tensor().t()?)?
                .broadcast_add(self.bias.as_tensor())?),
            Some((tape, layer)) => {
                let (w, b) = (
                    self.weight.as_tensor().detach(),
                    self.bias.as_tensor().detach(),
                );
                let z = if x.rank() == 2 && tape.cpu_ops_apply(x) {
                    // Input-gradient-only matmul: no unused weight gradient.
                    x.contiguous()?.apply_op2(
                        &w,
                        Matmul {
                            rhs_transposed: true,
                        },
                    )?
                } else {
                    x.broadcast_matmul(&w.t()?)?
                };
                tap(z.broadcast_add(&b)?, x.detach(), tape, layer)
            }
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.weight.clone(), self.bias.clone()]
    }

    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        if entry.input.rank() == 2 {
            // Ghost norm (Goodfellow 2015): ‖g‖²·(‖a‖² + 1) for a single token.
            let g2 = grad_out.sqr()?.sum(1)?;
            let a2 = (entry.input.sqr()?.sum(1)? + 1.0)?;
            return Ok((g2 * a2)?);
        }
        materialised_squared_norms(&self.per_sample_grads(entry, grad_out)?)
    }

    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let g = Self::as_sequence(grad_out)?;
        let a = Self::as_sequence(&entry.input)?;
        let (b, t, out) = g.dims3()?;
        let gc = g
            .broadcast_mul(&factors.reshape((b, 1, 1))?)?
            .reshape((b * t, out))?;
        let a = a.reshape((b * t, ()))?;
        Ok(vec![gc.t()?.matmul(&a)?, gc.sum(0)?])
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        let g = Self::as_sequence(grad_out)?;
        let a = Self::as_sequence(&entry.input)?;
        Ok(vec![
            g.transpose(1, 2)?.contiguous()?.matmul(&a.contiguous()?)?,
            g.sum(1)?,
        ])
    }

    fn has_input_gradient(&self) -> bool {
        true
    }

    fn input_gradient(&self, _entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        let w = self.weight.as_tensor().detach();
        if grad_out.rank() == 2 && cpu::applies(grad_out) {
            return Ok(grad_out.contiguous()?.apply_op2_no_bwd(
                &w,
                &Matmul {
                    rhs_transposed: false,
                },
            )?);
        }
        Ok(grad_out.broadcast_matmul(&w)?)
    }
}

/// A lookup table (V, D) applied to token ids (B, T) → (B, T, D).
pub struct DpEmbedding {
    weight: Var,
}

impl DpEmbedding {
    /// From the table (V, D).
    pub fn new(weight: Tensor) -> Result<Self> {
        weight.dims2()?;
        Ok(DpEmbedding {
            weight: Var::from_tensor(&weight)?,
        })
    }
}

impl DpLayer for DpEmbedding {
    fn forward(&self, ids: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        match tape {
            None => Ok(self
                .weight
                .as_tensor()
                .index_select(&flat, 0)?
                .reshape((b, t, ()))?),
            Some((tape, layer)) => {
                let z = self
                    .weight
                    .as_tensor()
                    .detach()
                    .index_select(&flat, 0)?
                    .reshape((b, t, ()))?;
                tap(z, ids.clone(), tape, layer)
            }
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.weight.clone()]
    }

    fn takes_token_ids(&self) -> bool {
        true
    }

    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        // ‖Σₜ gₜ e_{idₜ}‖² = Σ_{t,t'} [idₜ = id_t'] gₜ·g_t' (ghost norm with one-hot inputs).
        let ids = entry.input.to_dtype(DType::F32)?;
        let same = ids
            .unsqueeze(2)?
            .broadcast_eq(&ids.unsqueeze(1)?)?
            .to_dtype(DType::F32)?;
        let gram = grad_out.matmul(&grad_out.transpose(1, 2)?.contiguous()?)?;
        Ok((same * gram)?.flatten_from(1)?.sum(1)?)
    }

    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>> {
        let (b, t, d) = grad_out.dims3()?;
        let scaled = grad_out
            .broadcast_mul(&factors.reshape((b, 1, 1))?)?
            .reshape((b * t, d))?;
        let zeros = self.weight.as_tensor().zeros_like()?;
        Ok(vec![zeros.index_add(
            &entry.input.flatten_all()?,
            &scaled,
            0,
        )?])
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        let (b, _, _) = grad_out.dims3()?;
        let rows = (0..b)
            .map(|i| {
                let zeros = self.weight.as_tensor().zeros_like()?;
                Ok(zeros.index_add(&entry.input.get(i)?, &grad_out.get(i)?, 0)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![Tensor::stack(&rows, 0)?])
    }
}

/// 2-D convolution with bias on NCHW input (B, Cin, H, W), square kernel.
///
/// In DP mode the tape keeps the (detached) input and per-sample gradients are `Gᵢ·Uᵢ`
/// with `Uᵢ` its im2col matrix. On the CPU the forward is one custom op (sample by sample,
/// `Uᵢ` in cache, input gradient only) and norms and clipped sums rebuild `Uᵢ` per sample
/// (`crate::cpu`); elsewhere it is Candle's `conv2d` with the weight as a constant, and `U` is
/// built on the CPU.
pub struct DpConv2d {
    weight: Var,
    bias: Var,
    stride: usize,
    padding: usize,
}

impl DpConv2d {
    /// From a weight (Cout, Cin, k, k), a bias (Cout), stride and padding.
    pub fn new(weight: Tensor, bias: Tensor, stride: usize, padding: usize) -> Result<Self> {
        let (cout, _, kh, kw) = weight.dims4()?;
        if kh != kw || bias.dims1()? != cout || stride == 0 {
            return Err(Error::InvalidModel(
                "conv weight must be (Cout, Cin, k, k) with a (Cout) bias and stride >= 1".into(),
            ));
        }
        Ok(DpConv2d {
            weight: Var::from_tensor(&weight)?,
            bias: Var::from_tensor(&bias)?,
            stride,
            padding,
        })
    }

    /// The im2col geometry for an input of shape (B, Cin, H, W).
    fn geometry(&self, input: &Tensor) -> Result<Unfold> {
        let (_, channels, height, width) = input.dims4()?;
        let (_, _, kernel, _) = self.weight.as_tensor().dims4()?;
        if height + 2 * self.padding < kernel || width + 2 * self.padding < kernel {
            return Err(Error::InvalidModel(format!(
                "conv kernel {kernel} exceeds the padded input {height}×{width}"
            )));
        }
        Ok(Unfold {
            channels,
            height,
            width,
            kernel,
            stride: self.stride,
            padding: self.padding,
        })
    }

    /// im2col of the (detached) input: (B, L, Cin·k·k), columns in PyTorch's (cin, ky, kx)
    /// order, computed on the CPU.
    fn unfold(&self, input: &Tensor) -> Result<Tensor> {
        let geometry = self.geometry(input)?;
        let cpu = input.to_device(&Device::Cpu)?.contiguous()?;
        Ok(cpu.apply_op1_no_bwd(&geometry)?.to_device(input.device())?)
    }

    /// The weight as a constant (Cout, Cin·k·k) matrix, PyTorch's column order.
    fn weight_matrix(&self) -> Result<Tensor> {
        let (cout, cin, k, _) = self.weight.as_tensor().dims4()?;
        Ok(self
            .weight
            .as_tensor()
            .detach()
            .reshape((cout, cin * k * k))?)
    }

    /// The probe gradient as (B, Cout, L).
    fn grad_rows(grad_out: &Tensor) -> Result<Tensor> {
        let (b, cout, oh, ow) = grad_out.dims4()?;
        Ok(grad_out.reshape((b, cout, oh * ow))?)
    }
}

impl DpLayer for DpConv2d {
    fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor> {
        let conv = |w: &Tensor, b: &Tensor| -> Result<Tensor> {
            let z = x.conv2d(w, self.padding, self.stride, 1, 1)?;
            Ok(z.broadcast_add(&b.reshape((1, (), 1, 1))?)?)
        };
        match tape {
            None => conv(self.weight.as_tensor(), self.bias.as_tensor()),
            Some((tape, layer)) if tape.cpu_ops_apply(x) => {
                // One op, sample by sample, the im2col in cache; the weight is a constant,
                // so only the input gradient flows back.
                let geometry = self.geometry(x)?;
                let (oh, ow) = geometry.out_size();
                let b = x.dims4()?.0;
                let cout = self.weight.as_tensor().dim(0)?;
                let w = self.weight_matrix()?;
                let bias = self.bias.as_tensor().detach();
                let z = x
                    .contiguous()?
                    .apply_op3(&w, &bias, Conv(geometry))?
                    .reshape((b, cout, oh, ow))?;
                tap(z, x.detach(), tape, layer)
            }
            Some((tape, layer)) => {
                let z = conv(
                    &self.weight.as_tensor().detach(),
                    &self.bias.as_tensor().detach(),
                )?;
                tap(z, x.detach(), tape, layer)
            }
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.weight.clone(), self.bias.clone()]
    }

    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        if entry.cpu_ops && cpu::applies(grad_out) {
            let g = Self::grad_rows(grad_out)?.contiguous()?;
            let geometry = self.geometry(&entry.input)?;
            let (b, cout, _) = g.dims3()?;
            let width = cout * geometry.cols() + cout + 1;
            let rows_of = |g: &Tensor, x: &Tensor| -> Result<Tensor> {
                Ok(g.apply_op2_no_bwd(&x.contiguous()?, &ConvPerSampleRows(geometry))?)
            };
            if b * width <= entry.rows_limit {
                // Keep the per-sample gradients: the clipped sum is then a weighted row
                // sum, not a second im2col and gemm per sample.
                let rows = rows_of(&g, &entry.input)?;
                let norms = rows.narrow(1, width - 1, 1)?.flatten_all()?;
                entry.keep_rows(grad_out, rows);
                return Ok(norms);
            }
            // Too large to keep: norms slice by slice; the clipped sum recomputes.
            let slice = (entry.rows_limit / width).max(1);
            let mut norms = Vec::with_capacity(b);
            for start in (0..b).step_by(slice) {
                let len = slice.min(b - start);
                let rows = rows_of(
                    &g.narrow(0, start, len)?,
                    &entry.input.narrow(0, start, len)?,
                )?;
                norms.extend(
                    rows.narrow(1, width - 1, 1)?
                        .flatten_all()?
                        .to_vec1::<f32>()?,
                );
            }
            return Ok(Tensor::from_vec(norms, b, grad_out.device())?);
        }
        materialised_squared_norms(&self.per_sample_grads(entry, grad_out)?)
    }

    fn clipped_sum(
        &self,
        entry: &TapeEntry,
        grad_out: &Tensor,
        factors: &Tensor,
    ) -> Result<Vec<Tensor>> {
        if entry.cpu_ops && cpu::applies(grad_out) && cpu::applies(factors) {
            let sums = match entry.rows_for(grad_out) {
                Some(rows) => rows.apply_op2_no_bwd(&factors.contiguous()?, &WeightedRowSum)?,
                None => Self::grad_rows(grad_out)?.contiguous()?.apply_op3_no_bwd(
                    &entry.input.contiguous()?,
                    &factors.contiguous()?,
                    &ConvClippedSum(self.geometry(&entry.input)?),
                )?,
            };
            let weight = self.weight.as_tensor();
            let size = weight.elem_count();
            return Ok(vec![
                sums.narrow(0, 0, size)?.reshape(weight.shape())?,
                sums.narrow(0, size, sums.elem_count() - size)?,
            ]);
        }
        let g = Self::grad_rows(grad_out)?;
        let (b, cout, l) = g.dims3()?;
        let gc = g.broadcast_mul(&factors.reshape((b, 1, 1))?)?;
        let u = self.unfold(&entry.input)?;
        // (Cout, B·L) · (B·L, K): one matmul, no per-sample tensors.
        let lhs = gc.transpose(0, 1)?.contiguous()?.reshape((cout, b * l))?;
        let weight = lhs
            .matmul(&u.reshape((b * l, ()))?)?
            .reshape(self.weight.as_tensor().shape())?;
        Ok(vec![weight, gc.sum(2)?.sum(0)?])
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        let g = Self::grad_rows(grad_out)?;
        let u = self.unfold(&entry.input)?;
        let (b, _, _) = g.dims3()?;
        let mut shape = vec![b];
        shape.extend_from_slice(self.weight.as_tensor().dims());
        Ok(vec![g.contiguous()?.matmul(&u)?.reshape(shape)?, g.sum(2)?])
    }

    fn has_input_gradient(&self) -> bool {
        true
    }

    fn input_gradient(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        Ok(cpu::conv_input_gradient(
            self.geometry(&entry.input)?,
            &Self::grad_rows(grad_out)?,
            &self.weight_matrix()?,
        )?)
    }
}

/// One stage of an [`AutogradModel`].
pub enum Stage {
    /// A parametric layer.
    Layer(Box<dyn DpLayer>),
    /// tanh.
    Tanh,
    /// ReLU.
    Relu,
    /// Mean over the sequence dimension: (B, T, D) → (B, D).
    MeanOverTime,
    /// Max pooling on NCHW, any stride (through index_select windows, which have an
    /// exact backward; Candle's own pooling backward does not handle every geometry).
    MaxPool {
        /// Window.
        kernel: usize,
        /// Stride.
        stride: usize,
    },
    /// (B, C, H, W) → (B, C·H·W), PyTorch's order.
    Flatten,
    /// Reshapes flat inputs (B, C·H·W) to images (B, C, H, W).
    Image {
        /// Channels.
        channels: usize,
        /// Height.
        height: usize,
        /// Width.
        width: usize,
    },
}

/// Max pooling by the maximum over k² strided `index_select` views.
fn max_pool(a: &Tensor, kernel: usize, stride: usize) -> Result<Tensor> {
    let (_, _, h, w) = a.dims4()?;
    if h < kernel || w < kernel {
        return Err(Error::InvalidModel(format!(
            "pool window {kernel} exceeds the input {h}×{w}"
        )));
    }
    let (oh, ow) = ((h - kernel) / stride + 1, (w - kernel) / stride + 1);
    let index = |offset: usize, n: usize| {
        Tensor::from_vec(
            (0..n)
                .map(|i| (offset + i * stride) as u32)
                .collect::<Vec<_>>(),
            n,
            a.device(),
        )
    };
    let mut best: Option<Tensor> = None;
    for ky in 0..kernel {
        for kx in 0..kernel {
            let window = a
                .index_select(&index(ky, oh)?, 2)?
                .index_select(&index(kx, ow)?, 3)?;
            best = Some(match best {
                None => window,
                Some(b) => b.maximum(&window)?,
            });
        }
    }
    best.ok_or_else(|| Error::InvalidModel("empty pool window".into()))
}

/// A sequential model on the autograd tier.
pub struct AutogradModel {
    stages: Vec<Stage>,
    portable: bool,
    cpu_chunk: usize,
    direct: bool,
    rows_limit: usize,
}

/// Default most samples per private backward with the CPU ops: past ~256 MNIST-CNN
/// samples the activations and kept per-sample rows of one backward outgrow the cache, and
/// throughput per sample falls (`cargo xtask bench dp-sgd --tier autograd`, docs/training.md).
pub const DEFAULT_CPU_CHUNK: usize = 256;

/// The result of a private backward on the autograd tier.
#[derive(Debug)]
pub struct AutogradGradients {
    /// `Σᵢ cᵢ∇ᵢ`, one tensor per var of [`AutogradModel::vars`], in order.
    pub clipped_sums: Vec<Tensor>,
    /// `‖∇ᵢ‖²` per example.
    pub squared_norms: Vec<f32>,
    /// Per-example losses.
    pub losses: Vec<f32>,
}

impl AutogradModel {
    /// From its stages.
    pub fn new(stages: Vec<Stage>) -> Self {
        AutogradModel {
            stages,
            portable: false,
            cpu_chunk: DEFAULT_CPU_CHUNK,
            direct: true,
            rows_limit: DEFAULT_KEPT_ROWS_LIMIT,
        }
    }

    /// Most samples per backward when the CPU ops apply: larger batches are processed in
    /// chunks of this size and their clipped sums added (clipping is per sample, so the
    /// result is the same up to float summation order; fixed chunks keep it bit-reproducible).
    /// Portable mode (and so CUDA) always takes the whole batch at once.
    pub fn with_cpu_chunk(mut self, samples: usize) -> Result<Self> {
        if samples == 0 {
            return Err(Error::InvalidModel(
                "the CPU chunk must be >= 1 sample".into(),
            ));
        }
        self.cpu_chunk = samples;
        Ok(self)
    }

    /// Candle's own ops only (the CUDA path), even on the CPU, where the tier otherwise
    /// uses its CPU custom ops (unfold, input-gradient-only matmuls, max-pool, tanh): the
    /// reference the custom ops are tested against.
    pub fn with_portable_ops(mut self) -> Self {
        self.portable = true;
        self
    }

    /// Most floats of per-sample gradients a layer may keep between its norm and
    /// clipped-sum passes (default [`DEFAULT_KEPT_ROWS_LIMIT`]); past it the norms are
    /// computed slice by slice and the clipped sum recomputes the gradients.
    pub fn with_kept_rows_limit(mut self, floats: usize) -> Self {
        self.rows_limit = floats;
        self
    }

    /// Candle's backward through probes even where the direct CPU backward applies (the
    /// reference the direct backward is tested against).
    pub fn with_candle_backward(mut self) -> Self {
        self.direct = false;
        self
    }

    fn cpu_ops_apply(&self, t: &Tensor) -> bool {
        !self.portable && cpu::applies(t)
    }

    /// Every trainable var, in stage order.
    pub fn vars(&self) -> Vec<Var> {
        self.stages
            .iter()
            .flat_map(|s| match s {
                Stage::Layer(l) => l.vars(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn run(&self, x: &Tensor, mut tape: Option<&mut Tape>) -> Result<Tensor> {
        let reads_ids = matches!(self.stages.first(), Some(Stage::Layer(l)) if l.takes_token_ids());
        let mut a = if reads_ids && x.dtype() != DType::U32 {
            x.to_dtype(DType::U32)?
        } else {
            x.clone()
        };
        for (i, stage) in self.stages.iter().enumerate() {
            if let Some(tape) = tape.as_deref_mut().filter(|t| t.direct) {
                tape.stage_inputs.push(a.clone());
            }
            a = match stage {
                Stage::Layer(layer) => layer.forward(&a, tape.as_deref_mut().map(|t| (t, i)))?,
                Stage::Tanh if self.cpu_ops_apply(&a) => a.contiguous()?.apply_op1(Tanh)?,
                Stage::Tanh => a.tanh()?,
                Stage::Relu => a.relu()?,
                Stage::MeanOverTime => a.mean(1)?,
                Stage::MaxPool { kernel, stride } if self.cpu_ops_apply(&a) => {
                    a.contiguous()?.apply_op1(MaxPool {
                        kernel: *kernel,
                        stride: *stride,
                    })?
                }
                Stage::MaxPool { kernel, stride } => max_pool(&a, *kernel, *stride)?,
                Stage::Flatten => a.flatten_from(1)?,
                Stage::Image {
                    channels,
                    height,
                    width,
                } => a.reshape(((), *channels, *height, *width))?,
            };
        }
        Ok(a)
    }

    /// Logits (no taps).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(x, None)
    }

    fn layer(&self, index: usize) -> Result<&dyn DpLayer> {
        match self.stages.get(index) {
            Some(Stage::Layer(l)) => Ok(l.as_ref()),
            _ => Err(Error::InvalidModel(format!(
                "tape entry for stage {index}, which has no parameters"
            ))),
        }
    }

    /// Forward with taps, per-example cross-entropy, one backward, then per-layer norms,
    /// clip factors and clipped sums. **Fails closed**: every var must receive exactly
    /// one clipped sum of its own shape, or the call errors.
    pub fn private_gradients(
        &self,
        x: &Tensor,
        labels: &[u32],
        rule: ClipRule,
    ) -> Result<AutogradGradients> {
        let batch = x.dim(0)?;
        if batch != labels.len() {
            return Err(Error::InvalidModel(format!(
                "{batch} examples but {} labels",
                labels.len()
            )));
        }
        if !self.cpu_ops_apply(x) || batch <= self.cpu_chunk {
            return self.private_gradients_of_chunk(x, labels, rule);
        }
        let mut total: Option<AutogradGradients> = None;
        for start in (0..batch).step_by(self.cpu_chunk) {
            let len = self.cpu_chunk.min(batch - start);
            let part = self.private_gradients_of_chunk(
                &x.narrow(0, start, len)?,
                &labels[start..start + len],
                rule,
            )?;
            total = Some(match total {
                None => part,
                Some(mut sum) => {
                    for (s, p) in sum.clipped_sums.iter_mut().zip(&part.clipped_sums) {
                        *s = (&*s + p)?;
                    }
                    sum.squared_norms.extend(part.squared_norms);
                    sum.losses.extend(part.losses);
                    sum
                }
            });
        }
        total.ok_or_else(|| Error::InvalidModel("empty batch".into()))
    }

    fn private_gradients_of_chunk(
        &self,
        x: &Tensor,
        labels: &[u32],
        rule: ClipRule,
    ) -> Result<AutogradGradients> {
        let (tape, losses, grad_outs) = self.layer_output_gradients(x, labels)?;
        // Per-layer squared norms (B,) of every tap, then the per-example total.
        let mut layer_norms = Vec::new();
        for (entry, g) in tape.entries.iter().zip(&grad_outs) {
            layer_norms.push(
                self.layer(entry.layer)?
                    .squared_norms(entry, g)?
                    .to_vec1::<f32>()?,
            );
        }
        if layer_norms.is_empty() {
            return Err(Error::InvalidModel(
                "the model has no parametric layer".into(),
            ));
        }
        let batch = layer_norms[0].len();
        let sq: Vec<f32> = (0..batch)
            .map(|i| layer_norms.iter().map(|l| l[i]).sum())
            .collect();
        let layers = layer_norms.len();
        let mut clipped_sums = Vec::new();
        for ((entry, g), norms) in tape.entries.iter().zip(&grad_outs).zip(&layer_norms) {
            let factors: Vec<f32> = (0..batch)
                .map(|i| match (sq[i].is_finite(), rule) {
                    (false, _) => 0.0,
                    (true, ClipRule::PerLayer { .. }) => rule.factor(norms[i], layers),
                    (true, _) => rule.factor(sq[i], 1),
                })
                .collect();
            let factors = Tensor::from_vec(factors, batch, x.device())?;
            let g = zero_nonfinite_rows(g, &sq)?;
            clipped_sums.extend(self.layer(entry.layer)?.clipped_sum(entry, &g, &factors)?);
        }
        let vars = self.vars();
        if clipped_sums.len() != vars.len() {
            return Err(Error::InvalidModel(format!(
                "refusing to step: {} of {} parameters have a clipped gradient",
                clipped_sums.len(),
                vars.len()
            )));
        }
        for (i, (sum, var)) in clipped_sums.iter().zip(&vars).enumerate() {
            if sum.shape() != var.as_tensor().shape() {
                return Err(Error::InvalidModel(format!(
                    "refusing to step: parameter {i} has shape {:?} but its clipped gradient {:?}",
                    var.as_tensor().shape(),
                    sum.shape()
                )));
            }
        }
        Ok(AutogradGradients {
            clipped_sums,
            squared_norms: sq,
            losses,
        })
    }

    /// Materialised per-sample gradients, one (B, …) tensor per var (tests).
    pub fn per_sample_gradients(&self, x: &Tensor, labels: &[u32]) -> Result<Vec<Tensor>> {
        let (tape, _, grad_outs) = self.layer_output_gradients(x, labels)?;
        let mut out = Vec::new();
        for (entry, g) in tape.entries.iter().zip(&grad_outs) {
            out.extend(self.layer(entry.layer)?.per_sample_grads(entry, g)?);
        }
        Ok(out)
    }

    /// Whether the direct backward applies: CPU ops on, and every stage has a CPU backward
    /// of its own (parametric layers through [`DpLayer::input_gradient`]).
    fn direct_backward_applies(&self, x: &Tensor) -> bool {
        self.cpu_ops_apply(x)
            && self.stages.iter().all(|stage| match stage {
                Stage::Layer(l) => l.has_input_gradient() && !l.takes_token_ids(),
                Stage::MeanOverTime => false,
                Stage::Tanh
                | Stage::Relu
                | Stage::MaxPool { .. }
                | Stage::Flatten
                | Stage::Image { .. } => true,
            })
    }

    /// The tape of a forward, the per-example losses and each tapped layer's output
    /// gradient `dL/dz` (B, …), in tape order — by the direct backward where it applies,
    /// else by Candle's backward through the probes.
    fn layer_output_gradients(
        &self,
        x: &Tensor,
        labels: &[u32],
    ) -> Result<(Tape, Vec<f32>, Vec<Tensor>)> {
        let mut tape = Tape {
            portable: self.portable,
            direct: self.direct && self.direct_backward_applies(x),
            rows_limit: self.rows_limit,
            ..Tape::default()
        };
        let logits = self.run(x, Some(&mut tape))?;
        if tape.direct {
            let (losses, dlogits) = cross_entropy_gradient(&logits, labels)?;
            let grad_outs = self.direct_backward(&tape, &logits, dlogits)?;
            return Ok((tape, losses, grad_outs));
        }
        let (losses, grads) = per_example_backward(&logits, labels)?;
        let mut grad_outs = Vec::new();
        for entry in &tape.entries {
            let probe = entry.probe.as_ref().ok_or_else(|| {
                Error::InvalidModel("a tape entry without a probe outside direct mode".into())
            })?;
            grad_outs.push(grads.get(probe.as_tensor()).cloned().ok_or_else(|| {
                Error::InvalidModel(format!(
                    "stage {} received no gradient: it is not on the loss's path",
                    entry.layer
                ))
            })?);
        }
        Ok((tape, losses, grad_outs))
    }

    /// Walks the stages in reverse from `dL/dlogits`, each with its CPU backward, and
    /// returns every tapped layer's output gradient in tape order. Stops at the first
    /// parametric layer: nothing below it has parameters.
    fn direct_backward(
        &self,
        tape: &Tape,
        logits: &Tensor,
        dlogits: Tensor,
    ) -> Result<Vec<Tensor>> {
        if tape.stage_inputs.len() != self.stages.len() {
            return Err(Error::InvalidModel(
                "direct backward: the forward did not record every stage".into(),
            ));
        }
        let first_layer = self
            .stages
            .iter()
            .position(|s| matches!(s, Stage::Layer(_)))
            .ok_or_else(|| Error::InvalidModel("the model has no parametric layer".into()))?;
        let mut grad_outs: Vec<Option<Tensor>> = vec![None; tape.entries.len()];
        let mut g = dlogits;
        for (i, stage) in self.stages.iter().enumerate().rev() {
            let input = &tape.stage_inputs[i];
            let output = tape.stage_inputs.get(i + 1).unwrap_or(logits);
            g = match stage {
                Stage::Layer(layer) => {
                    let slot = tape
                        .entries
                        .iter()
                        .position(|e| e.layer == i)
                        .ok_or_else(|| {
                            Error::InvalidModel(format!("stage {i} recorded no tape entry"))
                        })?;
                    grad_outs[slot] = Some(g.clone());
                    if i == first_layer {
                        break;
                    }
                    layer.input_gradient(&tape.entries[slot], &g)?
                }
                Stage::Tanh => cpu::tanh_backward(output, &g)?,
                // PyTorch's convention: no gradient where the input is exactly 0.
                Stage::Relu => (g * input.gt(0.0)?.to_dtype(DType::F32)?)?,
                Stage::MaxPool { kernel, stride } => cpu::max_pool_backward(
                    MaxPool {
                        kernel: *kernel,
                        stride: *stride,
                    },
                    input,
                    &g,
                )?,
                Stage::Flatten | Stage::Image { .. } => g.reshape(input.shape())?,
                Stage::MeanOverTime => {
                    return Err(Error::InvalidModel(
                        "direct backward: mean over time has no CPU backward".into(),
                    ))
                }
            };
        }
        grad_outs
            .into_iter()
            .enumerate()
            .map(|(slot, g)| {
                g.ok_or_else(|| {
                    Error::InvalidModel(format!(
                        "stage {} received no gradient: it is not on the loss's path",
                        tape.entries[slot].layer
                    ))
                })
            })
            .collect()
    }
}

/// Zeroes the rows (examples) whose squared norm is not finite, so that NaN·0 cannot
/// spread into the sums.
fn zero_nonfinite_rows(g: &Tensor, squared_norms: &[f32]) -> Result<Tensor> {
    if squared_norms.iter().all(|s| s.is_finite()) {
        return Ok(g.clone());
    }
    let keep: Vec<f32> = squared_norms
        .iter()
        .map(|s| if s.is_finite() { 1.0 } else { 0.0 })
        .collect();
    let mut shape = vec![1usize; g.rank()];
    shape[0] = keep.len();
    let mask = Tensor::from_vec(keep, shape, g.device())?;
    Ok(g.where_cond(&mask.broadcast_as(g.shape())?.ne(0.0)?, &g.zeros_like()?)?)
}

/// Per-example cross-entropy and the gradients of their sum.
/// Per-example cross-entropy of `logits (B, O)` and its gradient `softmax − onehot(y)`
/// (the gradient of the summed loss) as a tensor, labels checked.
fn cross_entropy_gradient(logits: &Tensor, labels: &[u32]) -> Result<(Vec<f32>, Tensor)> {
    let (b, classes) = logits.dims2()?;
    crate::loss::check_labels(b * classes, labels, classes)?;
    let (losses, grad) =
        crate::loss::cross_entropy(&logits.flatten_all()?.to_vec1::<f32>()?, labels, classes);
    Ok((
        losses,
        Tensor::from_vec(grad, (b, classes), logits.device())?,
    ))
}

fn per_example_backward(
    logits: &Tensor,
    labels: &[u32],
) -> Result<(Vec<f32>, candle_core::backprop::GradStore)> {
    let device: &Device = logits.device();
    let y = Tensor::from_slice(labels, labels.len(), device)?;
    let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let losses = log_probs.gather(&y.unsqueeze(1)?, 1)?.squeeze(1)?.neg()?;
    let grads = losses.sum_all()?.backward()?;
    Ok((losses.to_vec1()?, grads))
}
