//! One sample's backward through every layer, and materialised per-sample gradients.

use super::super::spec::{size, Kind, LayerPlan, NetSpec};
use super::layer_backward::{
    avg_pool_backward, conv_input_gradient, conv_weight_gradient, linear_input_gradient,
    linear_squared_norm, linear_weight_gradient, max_pool_backward, relu_backward, tanh_backward,
    ConvTarget,
};
#[cfg(test)]
use super::workspace::Workspace;
use super::workspace::{linear_shape, Activations, Scratch};
use crate::cpu::kernels::Patches;

/// What the per-sample backward does with parameter gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Write every layer's per-sample gradient into `psg` (tests).
    Materialize,
    /// Conv gradients into `psg`, linear output gradients stashed; per-layer norms.
    Private,
    /// Conv gradients added to `acc`, linear output gradients stashed.
    Plain,
}

/// What every sample's backward reads: the network, θ, `d loss / d logits` of the batch
/// and the forward's activations.
#[derive(Clone, Copy)]
pub(super) struct Inputs<'a> {
    pub(super) spec: &'a NetSpec,
    pub(super) theta: &'a [f32],
    pub(super) dlogits: &'a [f32],
    pub(super) activations: Activations<'a>,
}

#[cfg(test)]
/// Per-sample gradients, materialised (B × P), for tests and audits.
#[cfg(test)]
pub fn per_sample_gradients(
    spec: &NetSpec,
    theta: &[f32],
    dlogits: &[f32],
    ws: &mut Workspace,
) -> Vec<Vec<f32>> {
    let batch = ws.batch;
    let (activations, scratch) = ws.split();
    let mut scratch = scratch[0].clone();
    let inputs = Inputs {
        spec,
        theta,
        dlogits,
        activations,
    };
    (0..batch)
        .map(|i| {
            backward_sample(&inputs, i, 0, &mut scratch, Mode::Materialize);
            scratch.psg.clone()
        })
        .collect()
}

/// Sample `i`'s backward. Fills `scratch.layer_sq` with the squared norm of each
/// parametric layer's gradient (except in `Plain` mode); conv gradients go to `psg`
/// (`Private`, `Materialize`) or are added to `acc` (`Plain`); linear gradients are written
/// to `psg` (`Materialize`) or their output gradient is stashed at `linear_grads[stash..]`.
#[inline(always)]
pub(super) fn backward_sample(
    inputs: &Inputs<'_>,
    i: usize,
    stash: usize,
    scratch: &mut Scratch,
    mode: Mode,
) {
    let layers = &inputs.spec.layers;
    let out_size = inputs.spec.output_size();
    let Scratch {
        patches,
        du,
        bias,
        grad_a,
        grad_b,
        psg,
        acc,
        linear_grads,
        layer_sq,
        ..
    } = scratch;
    let (mut d, mut d_in) = (grad_a, grad_b);
    d[..out_size].copy_from_slice(&inputs.dlogits[i * out_size..][..out_size]);
    let linear_outputs: usize = layers
        .iter()
        .filter_map(linear_shape)
        .map(|(_, nout)| nout)
        .sum();
    let mut sample = SampleBackward {
        inputs,
        i,
        mode,
        patches,
        du,
        bias,
        psg,
        acc,
        linear_grads,
        param_slot: layer_sq.len(),
        layer_sq,
        stash_end: stash + linear_outputs,
    };
    for (l, layer) in layers.iter().enumerate().rev() {
        let has_params = layer.params.1 > 0;
        if !has_params && !layer.needs_input_grad {
            break;
        }
        let (in_size, o_size) = (size(layer.input), size(layer.output));
        sample.layer(l, layer, &d[..o_size], &mut d_in[..in_size]);
        if !layer.needs_input_grad {
            break;
        }
        std::mem::swap(&mut d, &mut d_in);
    }
}

/// One sample's backward in progress: its scratch, and its next parametric layer's slot in
/// `layer_sq` and end of stash in `linear_grads` (layers are met in reverse).
struct SampleBackward<'s, 'a> {
    inputs: &'s Inputs<'a>,
    i: usize,
    mode: Mode,
    patches: &'s mut [Option<Patches>],
    bias: &'s mut [f32],
    du: &'s mut [f32],
    psg: &'s mut [f32],
    acc: &'s mut [f32],
    linear_grads: &'s mut [f32],
    layer_sq: &'s mut [f32],
    param_slot: usize,
    stash_end: usize,
}

/// One parametric layer of one sample: its input, parameters and output gradient.
#[derive(Clone, Copy)]
struct Step<'a> {
    layer: &'a LayerPlan,
    a: &'a [f32],
    params: &'a [f32],
    grad_out: &'a [f32],
}

impl SampleBackward<'_, '_> {
    /// Layer `l`: its parameter gradient and norm (parametric layers), and its input
    /// gradient into `grad_in` (a parameter-free layer always needs one). Only what the
    /// layer's backward needs is read: a parametric layer's input, an activation's output
    /// (the forward keeps no other, `workspace::output_kept`).
    #[inline(always)]
    fn layer(&mut self, l: usize, layer: &LayerPlan, grad_out: &[f32], grad_in: &mut [f32]) {
        let (activations, i, theta) = (self.inputs.activations, self.i, self.inputs.theta);
        let (offset, count) = layer.params;
        let step = |a| Step {
            layer,
            a,
            params: &theta[offset..][..count],
            grad_out,
        };
        let o_size = grad_out.len();
        match layer.kind {
            Kind::Linear { nin, nout } => {
                let step = step(activations.layer_input(l, i, nin));
                self.linear(step, nin, nout, grad_in);
            }
            Kind::Conv { cout, .. } => {
                let step = step(activations.layer_input(l, i, grad_in.len()));
                self.conv(l, step, cout, grad_in);
            }
            Kind::Tanh => tanh_backward(grad_out, activations.layer_output(l, i, o_size), grad_in),
            Kind::Relu => relu_backward(grad_out, activations.layer_output(l, i, o_size), grad_in),
            Kind::Flatten => grad_in.copy_from_slice(grad_out),
            Kind::MaxPool { kernel, stride } => {
                let arg = activations.argmax(l, i, o_size);
                max_pool_backward(layer, kernel, stride, grad_out, arg, grad_in);
            }
            Kind::AvgPool { kernel, stride } => {
                avg_pool_backward(layer, kernel, stride, grad_out, grad_in);
            }
        }
    }

    /// A linear layer: its gradient written out (`Materialize`) or its output gradient
    /// stashed for the book-keeping gemm; its ghost norm; its input gradient if needed.
    #[inline(always)]
    fn linear(&mut self, step: Step<'_>, nin: usize, nout: usize, grad_in: &mut [f32]) {
        let Step {
            layer,
            a,
            params,
            grad_out,
        } = step;
        self.param_slot -= 1;
        self.stash_end -= nout;
        if self.mode == Mode::Materialize {
            let (offset, count) = layer.params;
            linear_weight_gradient(nin, nout, a, grad_out, &mut self.psg[offset..][..count]);
        } else {
            self.linear_grads[self.stash_end..self.stash_end + nout]
                .copy_from_slice(&grad_out[..nout]);
        }
        self.layer_sq[self.param_slot] = linear_squared_norm(&grad_out[..nout], a);
        if layer.needs_input_grad {
            linear_input_gradient(nin, nout, params, grad_out, grad_in);
        }
    }

    /// A conv layer: its gradient written out with its squared norm, or added to the
    /// chunk's sum (`Plain`); its input gradient if needed.
    #[inline(always)]
    fn conv(&mut self, l: usize, step: Step<'_>, cout: usize, grad_in: &mut [f32]) {
        let Step {
            layer,
            a,
            params,
            grad_out,
        } = step;
        self.param_slot -= 1;
        let (offset, count) = layer.params;
        let target = match self.mode {
            Mode::Plain => ConvTarget::Accumulate(&mut self.acc[offset..][..count]),
            Mode::Private | Mode::Materialize => ConvTarget::Write(
                &mut self.psg[offset..][..count],
                &mut self.layer_sq[self.param_slot],
            ),
        };
        let patches = self.patches[l].as_mut().unwrap_or_else(|| unreachable!());
        conv_weight_gradient(cout, a, grad_out, patches, self.bias, target);
        if layer.needs_input_grad {
            conv_input_gradient(cout, params, grad_out, patches, self.du, grad_in);
        }
    }
}
