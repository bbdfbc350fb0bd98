//! The 2-D convolution.

use candle_core::{Device, Tensor, Var};

use super::layer::{materialised_squared_norms, DpLayer};
use super::tape::{tap, Tape, TapeEntry};
use crate::cpu::{self, Conv, ConvClippedSum, ConvPerSampleRows, Unfold, WeightedRowSum};
use crate::error::{Error, Result};

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
            return Err(Error::invalid_model(
                "Conv2d",
                "conv weight must be (Cout, Cin, k, k) with a (Cout) bias and stride >= 1",
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
