//! A linear layer with bias on the CPU in one op: `x wᵀ + b` on rows of any rank, the rows
//! started from the bias inside the GEMM, optionally followed by a GELU. One node instead
//! of a matmul, a bias and an activation: Candle's backward gives every node's input a zero
//! tensor and an addition (for an MLP's hidden layer, 4·d floats per token each), and each
//! extra node's forward is one more pass over the output.

use candle_core::{CpuStorage, CustomOp3, Device, Layout, Shape, Tensor};

use super::gelu::Gelu;
use super::matmul::{linear_weight_gradient, rows_times, Matmul};
use super::row_sums::row_sums;
use super::{f32_slice, keep_gradient, GradientSlot};

/// `x (…, K)`, `w (N, K)`, `b (N)` → `z = x wᵀ + b` (…, N), or `GELU(z)` with an
/// `activation` (`z` is kept for the backward). Backward: `x`'s gradient, and with
/// `parameter_gradients` the weight's `gᵀ x` and the bias's column sums of `g`, `g` the
/// gradient of `z` (without, both are constants: a private forward); `g` is left in
/// `catch`.
pub(crate) struct Linear {
    parameter_gradients: bool,
    catch: Option<GradientSlot>,
    activation: Option<Gelu>,
    /// `z`, when an activation follows it.
    pre_activation: GradientSlot,
}

impl Linear {
    /// The op; see the type's documentation.
    pub(crate) fn new(
        parameter_gradients: bool,
        catch: Option<GradientSlot>,
        activation: Option<Gelu>,
    ) -> Self {
        Linear {
            parameter_gradients,
            catch,
            activation,
            pre_activation: GradientSlot::default(),
        }
    }

    /// The gradient of `z` from the output's.
    fn pre_activation_gradient(&self, grad_res: &Tensor) -> candle_core::Result<Tensor> {
        let Some(activation) = self.activation else {
            return Ok(grad_res.clone());
        };
        let z = self
            .pre_activation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| candle_core::Error::Msg("linear: no kept pre-activation".into()))?;
        activation.input_gradient(&z, grad_res)
    }
}

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "dp-linear"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let dims = l1.shape().dims();
        let k = dims.last().copied().unwrap_or(0);
        let m = l1.shape().elem_count().checked_div(k).unwrap_or(0);
        let (n, k2) = l2.shape().dims2()?;
        let bias = f32_slice(s3, l3)?;
        if k != k2 || dims.is_empty() || bias.len() != n {
            return Err(candle_core::Error::Msg(format!(
                "linear: {dims:?} · {:?}ᵀ + {:?}",
                l2.shape().dims(),
                l3.shape().dims()
            )));
        }
        let (x, w) = (f32_slice(s1, l1)?, f32_slice(s2, l2)?);
        let out = rows_times(x, w, (m, n, k), true, Some(bias));
        let mut shape = dims.to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        let shape = Shape::from(shape);
        let Some(activation) = self.activation else {
            return Ok((CpuStorage::F32(out), shape));
        };
        let y = activation.apply(&out);
        let z = Tensor::from_vec(out, shape.clone(), &Device::Cpu)?;
        *self
            .pre_activation
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(z);
        Ok((CpuStorage::F32(y), shape))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = self.pre_activation_gradient(grad_res)?.contiguous()?;
        keep_gradient(self.catch.as_ref(), &grad);
        let (dx, parameters) = linear_backward(x, w, &grad, self.parameter_gradients)?;
        Ok(match parameters {
            Some((dw, db)) => (Some(dx), Some(dw), Some(db.reshape(b.shape())?)),
            None => (Some(dx), None, None),
        })
    }
}

/// The backward of `x wᵀ + b` (`w` (N, K) contiguous) from the contiguous gradient `g` of
/// its output: `x`'s gradient `g w`, and with `parameter_gradients` the weight's `gᵀ x` and
/// the bias's column sums of `g` (N,).
pub(super) fn linear_backward(
    x: &Tensor,
    w: &Tensor,
    grad: &Tensor,
    parameter_gradients: bool,
) -> candle_core::Result<(Tensor, Option<(Tensor, Tensor)>)> {
    let dx = grad.apply_op2_no_bwd(&w.contiguous()?, &Matmul::input_gradient())?;
    if !parameter_gradients {
        return Ok((dx, None));
    }
    let n = w.dim(0)?;
    let dw = linear_weight_gradient(x, w, grad)?;
    let db = row_sums(&grad.reshape((1, (), n))?)?.reshape(n)?;
    Ok((dx, Some((dw, db))))
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor, Var};

    use super::Linear;

    /// On rows of rank 3, the values and all three gradients equal Candle's matmul and
    /// broadcast add's; the output's gradient is caught.
    #[test]
    fn a_trainable_linear_equals_candles_matmul_and_bias() {
        let (b, t, k, n) = (3, 5, 7, 4);
        let values = |len: usize, seed: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i + seed) * 37 % 97) as f32 - 48.0) / 31.0)
                .collect()
        };
        let x = Var::from_vec(values(b * t * k, 1), (b, t, k), &Device::Cpu).expect("x");
        let w = Var::from_vec(values(n * k, 2), (n, k), &Device::Cpu).expect("w");
        let bias = Var::from_vec(values(n, 3), n, &Device::Cpu).expect("b");
        let g = Tensor::from_vec(values(b * t * n, 4), (b, t, n), &Device::Cpu).expect("g");
        let slot = super::GradientSlot::default();
        let op = Linear::new(true, Some(slot.clone()), None);
        let ours = x
            .as_tensor()
            .apply_op3(w.as_tensor(), bias.as_tensor(), op)
            .expect("ours");
        let theirs = x
            .as_tensor()
            .reshape((b * t, k))
            .and_then(|r| r.matmul(&w.as_tensor().t()?))
            .and_then(|r| r.broadcast_add(bias.as_tensor()))
            .and_then(|r| r.reshape((b, t, n)))
            .expect("candle");
        let host =
            |t: &Tensor| -> Vec<f32> { t.flatten_all().and_then(|t| t.to_vec1()).expect("host") };
        let close = |a: &[f32], b: &[f32]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
        };
        assert!(close(&host(&ours), &host(&theirs)), "values");
        let grads = |y: &Tensor| {
            (y * &g)
                .and_then(|l| l.sum_all())
                .and_then(|l| l.backward())
                .expect("backward")
        };
        let (a, c) = (grads(&ours), grads(&theirs));
        for v in [&x, &w, &bias] {
            let (ga, gc) = (
                a.get(v.as_tensor()).expect("ours"),
                c.get(v.as_tensor()).expect("candle"),
            );
            assert!(close(&host(ga), &host(gc)), "gradient");
        }
        let caught = slot.lock().expect("slot").take().expect("caught");
        assert!(close(&host(&caught), &host(&g)), "caught gradient");
    }
}
