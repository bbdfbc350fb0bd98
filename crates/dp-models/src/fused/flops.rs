//! The arithmetic of one DP-SGD step on a fused network, per sample: what a benchmark
//! divides by its time to report achieved GFLOP/s.

use super::spec::{Kind, NetSpec};

/// Floating-point operations per sample (a multiply-add counts 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flops {
    /// The forward pass: every layer's multiply-adds.
    pub forward: u64,
    /// The DP backward: input gradients (where a parametric layer lies below), the
    /// per-sample weight gradients, and their squared norm and clipped sum (2·P each).
    pub backward: u64,
}

impl Flops {
    /// Forward and DP backward together.
    pub fn total(&self) -> u64 {
        self.forward + self.backward
    }
}

impl NetSpec {
    /// The floating-point operations of one sample's forward and DP backward, counting
    /// the multiply-adds of convolutions and linear layers (activations and pooling,
    /// O(activations), are left out).
    pub fn flops_per_sample(&self) -> Flops {
        let (mut forward, mut backward) = (0u64, 0u64);
        for layer in &self.layers {
            let macs = match layer.kind {
                Kind::Conv {
                    kernel, cin, cout, ..
                } => (layer.output.0 * layer.output.1 * cout * cin * kernel * kernel) as u64,
                Kind::Linear { nin, nout } => (nin * nout) as u64,
                _ => continue,
            };
            forward += 2 * macs;
            backward += 2 * macs; // per-sample weight gradient
            if layer.needs_input_grad {
                backward += 2 * macs;
            }
        }
        backward += 4 * self.num_params as u64; // squared norm and clipped sum
        Flops { forward, backward }
    }
}
