//! The DP 2-D convolution ([`nn::Conv2d`]) as a stage of the sequential tier.
//!
//! The tape keeps the (detached) input and per-sample gradients are `Gᵢ·Uᵢ` with `Uᵢ` its
//! im2col matrix. On the CPU the forward is one custom op (sample by sample, `Uᵢ` in
//! cache, input gradient only) and norms and clipped sums rebuild `Uᵢ` per sample
//! (`crate::cpu`); elsewhere it is Candle's `conv2d` with the weight as a constant, and
//! `U` is built on the CPU.

use candle_core::{DType, Device, Tensor, Var};

use super::layer::{materialised_squared_norms, DpLayer};
use super::tape::{tap, Tape, TapeEntry};
use crate::cpu::{self, Conv, ConvClippedSum, ConvPerSampleRows, Unfold, WeightedRowSum};
use crate::error::{Error, Result};
use crate::fused::LayerSpec;
use crate::nn;

/// The im2col geometry of `conv` on an input of shape (B, Cin, H, W).
fn geometry(conv: &nn::Conv2d, input: &Tensor) -> Result<Unfold> {
    let (_, channels, height, width) = input.dims4()?;
    let (_, _, kernel, _) = conv.weight().as_tensor().dims4()?;
    let (stride, padding) = (conv.config().stride, conv.config().padding);
    if height + 2 * padding < kernel || width + 2 * padding < kernel {
        return Err(Error::invalid_model(
            "Conv2d",
            format!("conv kernel {kernel} exceeds the padded input {height}×{width}"),
        ));
    }
    Ok(Unfold {
        channels,
        height,
        width,
        kernel,
        stride,
        padding,
    })
}

/// im2col of the (detached) input: (B, L, Cin·k·k), columns in PyTorch's (cin, ky, kx)
/// order, computed on the CPU.
fn unfold(conv: &nn::Conv2d, input: &Tensor) -> Result<Tensor> {
    let geometry = geometry(conv, input)?;
    let cpu = input.to_device(&Device::Cpu)?.contiguous()?;
    Ok(cpu.apply_op1_no_bwd(&geometry)?.to_device(input.device())?)
}

/// The weight as a constant (Cout, Cin·k·k) matrix, PyTorch's column order.
fn weight_matrix(conv: &nn::Conv2d) -> Result<Tensor> {
    let weight = conv.weight().as_tensor();
    let (cout, cin, k, _) = weight.dims4()?;
    Ok(weight.detach().reshape((cout, cin * k * k))?)
}

/// The bias as a constant (Cout), zeros where the layer has none.
fn bias_vector(conv: &nn::Conv2d) -> Result<Tensor> {
    let weight = conv.weight().as_tensor();
    Ok(match conv.bias() {
        Some(b) => b.as_tensor().detach(),
        None => Tensor::zeros(weight.dim(0)?, DType::F32, weight.device())?,
    })
}

/// The probe gradient as (B, Cout, L).
fn grad_rows(grad_out: &Tensor) -> Result<Tensor> {
    let (b, cout, oh, ow) = grad_out.dims4()?;
    Ok(grad_out.reshape((b, cout, oh * ow))?)
}

/// The CPU kernels (per-sample rows with the bias column, clipped sums) apply.
fn cpu_kernels_apply(conv: &nn::Conv2d, entry: &TapeEntry, t: &Tensor) -> bool {
    conv.bias().is_some() && entry.cpu_ops && cpu::applies(t)
}

impl DpLayer for nn::Conv2d {
    fn forward(&self, x: &Tensor, tape: Option<(&mut Tape, usize)>) -> Result<Tensor> {
        match tape {
            None => Ok(candle_core::Module::forward(self, x)?),
            Some((tape, layer)) if tape.cpu_ops_apply(x) => {
                // One op, sample by sample, the im2col in cache; the weight is a constant,
                // so only the input gradient flows back.
                let geometry = geometry(self, x)?;
                let (oh, ow) = geometry.out_size();
                let b = x.dims4()?.0;
                let w = weight_matrix(self)?;
                let cout = w.dim(0)?;
                let z = x
                    .contiguous()?
                    .apply_op3(&w, &bias_vector(self)?, Conv(geometry))?
                    .reshape((b, cout, oh, ow))?;
                tap(z, x.detach(), tape, layer)
            }
            Some((tape, layer)) => {
                let c = self.config();
                let z = x.conv2d(
                    &self.weight().as_tensor().detach(),
                    c.padding,
                    c.stride,
                    1,
                    1,
                )?;
                let z = z.broadcast_add(&bias_vector(self)?.reshape((1, (), 1, 1))?)?;
                tap(z, x.detach(), tape, layer)
            }
        }
    }

    fn vars(&self) -> Vec<Var> {
        std::iter::once(self.weight())
            .chain(self.bias())
            .cloned()
            .collect()
    }

    fn squared_norms(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        if cpu_kernels_apply(self, entry, grad_out) {
            let g = grad_rows(grad_out)?.contiguous()?;
            let geometry = geometry(self, &entry.input)?;
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
        if cpu_kernels_apply(self, entry, grad_out) && cpu::applies(factors) {
            let sums = match entry.rows_for(grad_out) {
                Some(rows) => {
                    rows.apply_op2_no_bwd(&factors.contiguous()?, &WeightedRowSum { trailing: 1 })?
                }
                None => grad_rows(grad_out)?.contiguous()?.apply_op3_no_bwd(
                    &entry.input.contiguous()?,
                    &factors.contiguous()?,
                    &ConvClippedSum(geometry(self, &entry.input)?),
                )?,
            };
            let weight = self.weight().as_tensor();
            let size = weight.elem_count();
            return Ok(vec![
                sums.narrow(0, 0, size)?.reshape(weight.shape())?,
                sums.narrow(0, size, sums.elem_count() - size)?,
            ]);
        }
        let g = grad_rows(grad_out)?;
        let (b, cout, l) = g.dims3()?;
        let gc = g.broadcast_mul(&factors.reshape((b, 1, 1))?)?;
        let u = unfold(self, &entry.input)?;
        // (Cout, B·L) · (B·L, K): one matmul, no per-sample tensors.
        let lhs = gc.transpose(0, 1)?.contiguous()?.reshape((cout, b * l))?;
        let weight = lhs
            .matmul(&u.reshape((b * l, ()))?)?
            .reshape(self.weight().as_tensor().shape())?;
        Ok(match self.bias() {
            Some(_) => vec![weight, gc.sum(2)?.sum(0)?],
            None => vec![weight],
        })
    }

    fn per_sample_grads(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Vec<Tensor>> {
        let g = grad_rows(grad_out)?;
        let u = unfold(self, &entry.input)?;
        let (b, _, _) = g.dims3()?;
        let mut shape = vec![b];
        shape.extend_from_slice(self.weight().as_tensor().dims());
        let weight = g.contiguous()?.matmul(&u)?.reshape(shape)?;
        Ok(match self.bias() {
            Some(_) => vec![weight, g.sum(2)?],
            None => vec![weight],
        })
    }

    fn fused_layer(&self) -> Option<LayerSpec> {
        self.bias()?;
        let (cout, _, kernel, _) = self.weight().as_tensor().dims4().ok()?;
        Some(LayerSpec::Conv2d {
            out_channels: cout,
            kernel,
            stride: self.config().stride,
            padding: self.config().padding,
        })
    }

    fn has_input_gradient(&self) -> bool {
        true
    }

    fn input_gradient(&self, entry: &TapeEntry, grad_out: &Tensor) -> Result<Tensor> {
        Ok(cpu::conv_input_gradient(
            geometry(self, &entry.input)?,
            &grad_rows(grad_out)?,
            &weight_matrix(self)?,
        )?)
    }
}
