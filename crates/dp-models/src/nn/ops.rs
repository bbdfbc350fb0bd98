//! Differentiable replacements for candle-nn's fused ops that record no backward
//! (`ops::layer_norm`, `ops::rms_norm`, `ops::softmax_last_dim`, `rotary_emb::rope`):
//! the same values, built from Candle ops that have one, so that everything upstream of
//! them receives its gradient. On the CPU (f32) each is one custom op with a one-pass
//! backward; elsewhere (CUDA, f64) the `_composed` form from Candle ops.

use candle_core::{Result, Tensor, D};

use crate::cpu;

/// The one-pass CPU op where it applies (f32 on the CPU), else `composed`.
fn on_cpu_or(
    x: &Tensor,
    op: impl candle_core::CustomOp1 + Send + Sync + 'static,
    composed: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    if cpu::applies(x) {
        x.contiguous()?.apply_op1(op)
    } else {
        composed()
    }
}

/// `(x − mean) / √(var + eps)` over the last dimension (no scale or shift).
pub fn layer_norm(x: &Tensor, eps: f64) -> Result<Tensor> {
    let op = cpu::Normalize {
        eps: eps as f32,
        remove_mean: true,
    };
    on_cpu_or(x, op, || layer_norm_composed(x, eps))
}

/// [`layer_norm`] from Candle ops, on any device and dtype.
pub fn layer_norm_composed(x: &Tensor, eps: f64) -> Result<Tensor> {
    let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    centred.broadcast_div(&(var + eps)?.sqrt()?)
}

/// `x / √(mean(x²) + eps)` over the last dimension (no scale).
pub fn rms_norm(x: &Tensor, eps: f64) -> Result<Tensor> {
    let op = cpu::Normalize {
        eps: eps as f32,
        remove_mean: false,
    };
    on_cpu_or(x, op, || rms_norm_composed(x, eps))
}

/// [`rms_norm`] from Candle ops, on any device and dtype.
pub fn rms_norm_composed(x: &Tensor, eps: f64) -> Result<Tensor> {
    x.broadcast_div(&(x.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?)
}

/// Softmax over the last dimension.
pub fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    on_cpu_or(x, cpu::SoftmaxLastDim, || softmax_last_dim_composed(x))
}

/// [`softmax_last_dim`] from Candle ops, on any device and dtype.
pub fn softmax_last_dim_composed(x: &Tensor) -> Result<Tensor> {
    candle_nn::ops::softmax(x, D::Minus1)
}

/// GELU, tanh approximation (Candle's `gelu`, PyTorch's `approximate="tanh"`): one pass
/// each way on the CPU.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    on_cpu_or(x, cpu::Gelu { exact: false }, || x.gelu())
}

/// Exact GELU, `x·Φ(x)` (PyTorch's default `nn.GELU()`, Candle's `gelu_erf`): one pass
/// each way on the CPU.
pub fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    on_cpu_or(x, cpu::Gelu { exact: true }, || x.gelu_erf())
}

/// Rotary position embedding, the non-interleaved (GPT-NeoX / Llama) variant of
/// candle-nn's `rotary_emb::rope`: `x` (B, H, T, D), `cos` and `sin` (T, D/2); each half
/// pair `(x₁, x₂)` becomes `(x₁ cos − x₂ sin, x₂ cos + x₁ sin)`.
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let (x1, x2) = (
        x.narrow(D::Minus1, 0, half)?,
        x.narrow(D::Minus1, half, half)?,
    );
    let first = (x1.broadcast_mul(cos)? - x2.broadcast_mul(sin)?)?;
    let second = (x2.broadcast_mul(cos)? + x1.broadcast_mul(sin)?)?;
    Tensor::cat(&[first, second], D::Minus1)
}

/// Scaled dot-product attention of q, k, v (…, T, H·w), one shape, whose last dimension
/// holds `heads` heads of width w side by side (as a projection (B, T, d) leaves them;
/// `heads` 1 for inputs already split into (…, T, w)): per head,
/// `softmax(QKᵀ/√w [+ causal mask]) V`, where `causal` lets position i attend to positions
/// ≤ i only; the output has the inputs' layout. On the CPU (f32) one op each way that
/// reads the heads in place and recomputes each head's T × T probabilities in its
/// backward instead of storing them; elsewhere [`attention_composed`].
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, heads: usize, causal: bool) -> Result<Tensor> {
    if [q, k, v].iter().all(|t| cpu::applies(t)) {
        let width = q.dim(D::Minus1)? / heads.max(1);
        let op = cpu::Attention {
            heads,
            scale: 1.0 / (width as f32).sqrt(),
            causal,
        };
        return q
            .contiguous()?
            .apply_op3(&k.contiguous()?, &v.contiguous()?, op);
    }
    attention_composed(q, k, v, heads, causal)
}

/// [`attention`] from Candle ops, on any device and dtype.
pub fn attention_composed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    causal: bool,
) -> Result<Tensor> {
    let dims = q.dims().to_vec();
    let (t, d) = (q.dim(D::Minus2)?, q.dim(D::Minus1)?);
    if heads == 0 || !d.is_multiple_of(heads) {
        candle_core::bail!("attention: width {d} does not split into {heads} heads");
    }
    let width = d / heads;
    let split = |x: &Tensor| {
        x.reshape(((), t, heads, width))?
            .transpose(1, 2)?
            .contiguous()
    };
    let (q, k, v) = (split(q)?, split(k)?, split(v)?);
    let mut scores = (q.matmul(&k.t()?.contiguous()?)? / (width as f64).sqrt())?;
    if causal {
        let mask = causal_mask(t, q.device())?.to_dtype(scores.dtype())?;
        scores = scores.broadcast_add(&mask)?;
    }
    softmax_last_dim(&scores)?
        .matmul(&v)?
        .transpose(1, 2)?
        .reshape(dims)
}

/// A causal mask for attention scores (T, T): 0 on and below the diagonal, −∞ above;
/// add it to the scores before [`softmax_last_dim`].
pub fn causal_mask(t: usize, device: &candle_core::Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..t).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (t, t), device)
}

/// tanh: the one-`exp` kernel on the CPU (libm's `tanhf` is ~7× slower), Candle's elsewhere.
pub fn tanh(x: &Tensor) -> Result<Tensor> {
    on_cpu_or(x, cpu::Tanh, || x.tanh())
}

/// Max pooling of (B, C, H, W) with a square `kernel` and `stride`, windows may overlap;
/// the gradient goes to each window's first maximum. One op each way on the CPU;
/// elsewhere the maximum over k² strided `index_select` views (Candle's own `max_pool2d`
/// backward does not handle overlapping windows).
pub fn max_pool2d(x: &Tensor, kernel: usize, stride: usize) -> Result<Tensor> {
    on_cpu_or(x, cpu::MaxPool { kernel, stride }, || {
        max_pool2d_composed(x, kernel, stride)
    })
}

/// [`max_pool2d`] from Candle ops.
pub fn max_pool2d_composed(x: &Tensor, kernel: usize, stride: usize) -> Result<Tensor> {
    let (_, _, h, w) = x.dims4()?;
    if h < kernel || w < kernel || kernel == 0 || stride == 0 {
        candle_core::bail!("max_pool2d: window {kernel} (stride {stride}) does not fit {h}×{w}");
    }
    let (oh, ow) = ((h - kernel) / stride + 1, (w - kernel) / stride + 1);
    let index = |offset: usize, n: usize| {
        let idx: Vec<u32> = (0..n).map(|i| (offset + i * stride) as u32).collect();
        Tensor::from_vec(idx, n, x.device())
    };
    let mut best: Option<Tensor> = None;
    for ky in 0..kernel {
        let rows = x.index_select(&index(ky, oh)?, 2)?;
        for kx in 0..kernel {
            let window = rows.index_select(&index(kx, ow)?, 3)?;
            best = Some(match best {
                None => window,
                Some(b) => b.maximum(&window)?,
            });
        }
    }
    best.ok_or_else(|| candle_core::Error::Msg("max_pool2d: empty window".into()))
}
