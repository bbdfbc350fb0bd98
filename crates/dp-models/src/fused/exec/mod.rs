//! The fused executor: per-sample forward and DP backward over a reused workspace,
//! samples processed in parallel over a fixed number of chunks.
//!
//! * [`workspace`] — the activations kept between forward and backward, and the per-chunk
//!   scratch.
//! * [`forward`](mod@forward) — one sample end to end, layer by layer.
//! * [`per_sample`] — one sample's backward through every layer, and materialised
//!   per-sample gradients for tests; [`layer_backward`] — each layer kind's backward on
//!   slices.
//! * [`backward`](mod@backward) — the DP backward of a batch: per chunk, each sample's
//!   backward, norm and clip factors; conv gradients accumulated with their factor, linear
//!   layers by one book-keeping gemm; chunks reduced in order.

mod backward;
mod forward;
mod layer_backward;
mod per_sample;
mod workspace;

pub use backward::{backward, BackwardOutput};
pub use forward::forward;
#[cfg(test)]
pub use per_sample::per_sample_gradients;
pub use workspace::{Keep, Workspace};

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::cpu::kernels::FORCE_BASELINE;
    use crate::fused::{LayerSpec, NetSpec};
    use crate::ClipRule;

    #[derive(Clone, Copy, Debug)]
    enum Activation {
        Tanh,
        Relu,
    }

    /// The papers' MNIST CNN (`crate::models::mnist_cnn`) as a fused spec.
    fn mnist_cnn(activation: Activation) -> crate::Result<NetSpec> {
        crate::fused::tests::mnist_cnn(match activation {
            Activation::Tanh => LayerSpec::Tanh,
            Activation::Relu => LayerSpec::Relu,
        })
    }

    /// Deterministic values in [−scale, scale) (a 32-bit LCG; no noise source needed).
    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((state >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    /// Logits, clipped gradient sum and norms of one private step at the current level.
    fn step(activation: Activation) -> (Vec<f32>, BackwardOutput) {
        step_in(activation, &mut Workspace::default())
    }

    /// [`step`] in the workspace `ws`.
    fn step_in(activation: Activation, ws: &mut Workspace) -> (Vec<f32>, BackwardOutput) {
        let spec = mnist_cnn(activation).expect("the MNIST CNN is a valid network");
        let batch = 37; // chunks of unequal length
        let theta = values(spec.num_params(), 1, 0.2);
        let x = values(batch * spec.input_size(), 2, 1.0);
        let dlogits = values(batch * spec.output_size(), 3, 0.5);
        let logits = forward(&spec, &theta, &x, batch, ws, Keep::Backward);
        let rule = ClipRule::Flat { max_grad_norm: 0.1 };
        (logits, backward(&spec, &theta, &dlogits, ws, rule))
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// An inference forward gives the training forward's logits bit for bit, writes no
    /// batch buffer but the logits, and leaves nothing a backward could differentiate.
    #[test]
    fn an_inference_forward_keeps_only_the_logits() {
        for activation in [Activation::Tanh, Activation::Relu] {
            let spec = mnist_cnn(activation).expect("the MNIST CNN is a valid network");
            let batch = 37;
            let theta = values(spec.num_params(), 1, 0.2);
            let x = values(batch * spec.input_size(), 2, 1.0);
            let mut ws = Workspace::default();
            let inferred = forward(&spec, &theta, &x, batch, &mut ws, Keep::Logits);
            assert_eq!(bits(&inferred), bits(&step(activation).0), "{activation:?}");
            assert_eq!(ws.batch(), 0);
            let last = spec.layers.len() - 1;
            for (l, buf) in ws.outputs.iter().enumerate() {
                assert_eq!(buf.is_empty(), l != last, "{activation:?} layer {l}");
            }
            assert!(ws.argmax.iter().all(Vec::is_empty), "{activation:?}");
        }
    }

    /// A training step in a workspace an inference forward of a larger batch grew first
    /// is the step of a fresh workspace, bit for bit.
    #[test]
    fn a_step_after_an_inference_forward_is_unchanged() {
        let spec = mnist_cnn(Activation::Tanh).expect("the MNIST CNN is a valid network");
        let batch = 50;
        let theta = values(spec.num_params(), 4, 0.3);
        let x = values(batch * spec.input_size(), 5, 1.0);
        let mut ws = Workspace::default();
        forward(&spec, &theta, &x, batch, &mut ws, Keep::Logits);
        let (logits, out) = step_in(Activation::Tanh, &mut ws);
        let (fresh_logits, fresh) = step(Activation::Tanh);
        assert_eq!(bits(&logits), bits(&fresh_logits));
        assert_eq!(bits(&out.gradient_sum), bits(&fresh.gradient_sum));
        assert_eq!(bits(&out.squared_norms), bits(&fresh.squared_norms));
    }

    #[test]
    fn results_do_not_depend_on_the_vector_unit() {
        for activation in [Activation::Tanh, Activation::Relu] {
            let widest = step(activation);
            FORCE_BASELINE.store(true, Ordering::SeqCst);
            let baseline = step(activation);
            FORCE_BASELINE.store(false, Ordering::SeqCst);
            assert_eq!(bits(&widest.0), bits(&baseline.0), "{activation:?} logits");
            assert_eq!(
                bits(&widest.1.gradient_sum),
                bits(&baseline.1.gradient_sum),
                "{activation:?} gradient sum"
            );
            assert_eq!(
                bits(&widest.1.squared_norms),
                bits(&baseline.1.squared_norms),
                "{activation:?} norms"
            );
        }
    }

    /// The forward keeps for the batch only the outputs the backward reads: of the MNIST
    /// CNN, the activations' and the inputs of the parametric layers and the logits; the
    /// convolutions' and the first linear layer's pre-activations and the pooling before the
    /// flatten live in one sample's scratch.
    #[test]
    fn only_the_outputs_the_backward_reads_are_kept() {
        let spec = mnist_cnn(Activation::Tanh).expect("the MNIST CNN is a valid network");
        let kept: Vec<bool> = (0..spec.layers.len())
            .map(|l| workspace::output_kept(&spec.layers, l))
            .collect();
        // conv, tanh, max-pool, conv, tanh, max-pool, flatten, linear, tanh, linear.
        let expected = [
            false, true, true, false, true, false, true, false, true, true,
        ];
        assert_eq!(kept, expected);
        let mut ws = Workspace::default();
        let batch = 5;
        let x = values(batch * spec.input_size(), 2, 1.0);
        forward(
            &spec,
            &values(spec.num_params(), 1, 0.2),
            &x,
            batch,
            &mut ws,
            Keep::Backward,
        );
        for (l, buf) in ws.outputs.iter().enumerate() {
            assert_eq!(buf.is_empty(), !expected[l], "layer {l}");
        }
    }
}
