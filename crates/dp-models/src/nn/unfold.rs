//! im2col on any device, from Candle ops: the patches a convolution multiplies its kernel
//! with, which are the right factor of its per-sample gradients.

use candle_core::{Result, Tensor};

/// The patches of (B, C, H, W) for a (kh, kw) kernel: (B, OH·OW, C·kh·kw), columns in
/// PyTorch's (c, ky, kx) order, rows in (oy, ox) order.
pub(super) fn unfold2d(
    x: &Tensor,
    (kh, kw): (usize, usize),
    stride: usize,
    (ph, pw): (usize, usize),
) -> Result<Tensor> {
    let x = x.pad_with_zeros(2, ph, ph)?.pad_with_zeros(3, pw, pw)?;
    let (b, c, h, w) = x.dims4()?;
    let (oh, ow) = ((h - kh) / stride + 1, (w - kw) / stride + 1);
    let index = |offset: usize, n: usize| {
        let idx: Vec<u32> = (0..n).map(|i| (offset + i * stride) as u32).collect();
        Tensor::from_vec(idx, n, x.device())
    };
    let mut patches = Vec::with_capacity(kh * kw);
    for ky in 0..kh {
        let rows = x.index_select(&index(ky, oh)?, 2)?;
        for kx in 0..kw {
            patches.push(rows.index_select(&index(kx, ow)?, 3)?);
        }
    }
    Tensor::stack(&patches, 2)?
        .reshape((b, c * kh * kw, oh * ow))?
        .transpose(1, 2)?
        .contiguous()
}
