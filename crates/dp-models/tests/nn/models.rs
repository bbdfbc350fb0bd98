//! Whole models written as candle users write them, from DP layers and plain Candle ops,
//! against the per-example loop.

use candle_core::{Module, Tensor, D};
use dp_models::nn::{self, loss, ops, DpVarBuilder, Linear};

use super::check::{builder, check, random, tokens, Net};
use super::layers::select;

/// Multi-head self-attention from four DP Linear layers and the differentiable softmax.
struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    heads: usize,
    causal: bool,
}

impl Attention {
    fn new(d: usize, heads: usize, causal: bool, vb: DpVarBuilder) -> dp_models::Result<Self> {
        Ok(Attention {
            q: nn::linear(d, d, vb.pp("q"))?,
            k: nn::linear(d, d, vb.pp("k"))?,
            v: nn::linear(d, d, vb.pp("v"))?,
            o: nn::linear(d, d, vb.pp("o"))?,
            heads,
            causal,
        })
    }
}

impl Module for Attention {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let hd = d / self.heads;
        let split = |y: Tensor| {
            y.reshape((b, t, self.heads, hd))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (q, k, v) = (
            split(self.q.forward(x)?)?,
            split(self.k.forward(x)?)?,
            split(self.v.forward(x)?)?,
        );
        let mut scores = (q.matmul(&k.t()?.contiguous()?)? / (hd as f64).sqrt())?;
        if self.causal {
            scores = scores.broadcast_add(&ops::causal_mask(t, x.device())?)?;
        }
        let attn = ops::softmax_last_dim(&scores)?.matmul(&v)?;
        self.o.forward(&attn.transpose(1, 2)?.reshape((b, t, d))?)
    }
}

/// A pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with GELU.
struct Block {
    ln1: nn::LayerNorm,
    attn: Attention,
    ln2: nn::LayerNorm,
    up: Linear,
    down: Linear,
}

impl Block {
    fn new(d: usize, heads: usize, causal: bool, vb: DpVarBuilder) -> dp_models::Result<Self> {
        Ok(Block {
            ln1: nn::layer_norm(d, 1e-5, vb.pp("ln1"))?,
            attn: Attention::new(d, heads, causal, vb.pp("attn"))?,
            ln2: nn::layer_norm(d, 1e-5, vb.pp("ln2"))?,
            up: nn::linear(d, 2 * d, vb.pp("up"))?,
            down: nn::linear(2 * d, d, vb.pp("down"))?,
        })
    }
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = (x + self.attn.forward(&self.ln1.forward(x)?)?)?;
        let h = self
            .down
            .forward(&self.up.forward(&self.ln2.forward(&x)?)?.gelu()?)?;
        x + h
    }
}

#[test]
fn transformer_encoder_two_pre_ln_blocks() {
    let (varmap, taps, vb) = builder();
    let (vocab, t, d) = (11, 6, 8);
    let tok = nn::embedding(vocab, d, vb.pp("tok")).expect("layer");
    let pos = nn::embedding(t, d, vb.pp("pos")).expect("layer");
    let blocks: Vec<Block> = (0..2)
        .map(|i| Block::new(d, 2, false, vb.pp("blocks").pp(i)).expect("block"))
        .collect();
    let ln = nn::layer_norm(d, 1e-5, vb.pp("ln_f")).expect("layer");
    let head = nn::linear(d, 3, vb.pp("head")).expect("layer");
    let ids = tokens(11, 4, t, vocab);
    let labels = tokens(12, 4, 1, 3).squeeze(1).expect("labels");
    let positions = Tensor::arange(0u32, t as u32, &candle_core::Device::Cpu).expect("positions");
    let net = Net {
        taps,
        varmap,
        batch: 4,
        losses: Box::new(|b| {
            // Positions broadcast to the batch: DP layers take batch-first inputs.
            let at = positions.unsqueeze(0)?.repeat((b.len(), 1))?;
            let mut x = (tok.forward(&select(&ids, b)?)? + pos.forward(&at)?)?;
            for block in &blocks {
                x = block.forward(&x)?;
            }
            let logits = head.forward(&ln.forward(&x)?.mean(1)?)?;
            Ok(loss::cross_entropy(&logits, &select(&labels, b)?, None)?)
        }),
    };
    check(&net, "transformer encoder");
}

#[test]
fn causal_lm_with_tied_head_rope_and_ignore_index() {
    let (varmap, taps, vb) = builder();
    let (vocab, t, d, pad) = (13, 7, 8, 0u32);
    let tok = nn::embedding(vocab, d, vb.pp("tok")).expect("layer");
    let block = Block::new(d, 2, true, vb.pp("block")).expect("block");
    let norm = nn::rms_norm(d, 1e-6, vb.pp("norm")).expect("layer");
    // The LM head shares the embedding table.
    let head = Linear::from_vars(tok.embeddings().clone(), None, &taps).expect("tied head");
    let mut ids = tokens(13, 4, t, vocab).to_vec2::<u32>().expect("ids");
    ids[1][5] = pad; // padding at the end of two sequences
    ids[1][6] = pad;
    ids[3][6] = pad;
    let ids = Tensor::new(ids, &candle_core::Device::Cpu).expect("ids");
    // Rotary position angles for half the model width.
    let angles: Vec<f32> = (0..t)
        .flat_map(|p| (0..d / 2).map(move |i| p as f32 / 10f32.powf(2.0 * i as f32 / d as f32)))
        .collect();
    let angles = Tensor::from_vec(angles, (t, d / 2), &candle_core::Device::Cpu).expect("angles");
    let (cos, sin) = (angles.cos().expect("cos"), angles.sin().expect("sin"));
    let net = Net {
        taps,
        varmap,
        batch: 4,
        losses: Box::new(|b| {
            let x = tok.forward(&select(&ids, b)?)?;
            // Rope on the embeddings as one head (B, 1, T, D), for the test of its backward.
            let x = ops::rope(&x.unsqueeze(1)?, &cos, &sin)?.squeeze(1)?;
            let logits = head.forward(&norm.forward(&block.forward(&x)?)?)?;
            Ok(loss::next_token_cross_entropy(
                &logits,
                &select(&ids, b)?,
                Some(i64::from(pad)),
            )?)
        }),
    };
    check(&net, "causal LM");
}

/// A GRU cell from two DP Linear layers, unrolled over time: each layer is used T times.
struct Gru {
    input: Linear,
    hidden: Linear,
    size: usize,
}

impl Gru {
    fn step(&self, x: &Tensor, h: &Tensor) -> candle_core::Result<Tensor> {
        let (gx, gh) = (self.input.forward(x)?, self.hidden.forward(h)?);
        let chunk = |t: &Tensor, i: usize| t.narrow(1, i * self.size, self.size);
        let r = candle_nn::ops::sigmoid(&(chunk(&gx, 0)? + chunk(&gh, 0)?)?)?;
        let z = candle_nn::ops::sigmoid(&(chunk(&gx, 1)? + chunk(&gh, 1)?)?)?;
        let n = (chunk(&gx, 2)? + (r * chunk(&gh, 2)?)?)?.tanh()?;
        let keep = (z.ones_like()? - &z)?;
        (keep * n)? + (z * h)?
    }
}

#[test]
fn gru_unrolled_over_time() {
    let (varmap, taps, vb) = builder();
    let (features, size, t) = (3, 5, 6);
    let gru = Gru {
        input: nn::linear(features, 3 * size, vb.pp("gru.input")).expect("layer"),
        hidden: nn::linear(size, 3 * size, vb.pp("gru.hidden")).expect("layer"),
        size,
    };
    let head = nn::linear(size, 1, vb.pp("head")).expect("layer");
    let x = random(21, &[5, t, features], 1.0);
    let y = tokens(22, 5, 1, 2)
        .to_dtype(candle_core::DType::F32)
        .expect("targets");
    let net = Net {
        taps,
        varmap,
        batch: 5,
        losses: Box::new(|b| {
            let x = select(&x, b)?;
            let mut h = Tensor::zeros((b.len(), size), candle_core::DType::F32, x.device())?;
            for step in 0..t {
                h = gru.step(&x.narrow(1, step, 1)?.squeeze(1)?, &h)?;
            }
            Ok(loss::binary_cross_entropy_with_logits(
                &head.forward(&h)?,
                &select(&y, b)?,
            )?)
        }),
    };
    check(&net, "GRU");
}

#[test]
fn residual_cnn_block_with_group_norm() {
    let (varmap, taps, vb) = builder();
    let cfg = candle_nn::Conv2dConfig {
        padding: 1,
        ..Default::default()
    };
    let stem = nn::conv2d(2, 4, 3, cfg, vb.pp("stem")).expect("layer");
    let gn1 = nn::group_norm(2, 4, 1e-5, vb.pp("gn1")).expect("layer");
    let conv = nn::conv2d(4, 4, 3, cfg, vb.pp("conv")).expect("layer");
    let gn2 = nn::group_norm(2, 4, 1e-5, vb.pp("gn2")).expect("layer");
    let head = nn::linear(4, 3, vb.pp("head")).expect("layer");
    let img = random(31, &[4, 2, 6, 6], 1.0);
    let labels = tokens(32, 4, 1, 3).squeeze(1).expect("labels");
    let net = Net {
        taps,
        varmap,
        batch: 4,
        losses: Box::new(|b| {
            let x = gn1.forward(&stem.forward(&select(&img, b)?)?)?.relu()?;
            let x = (&x + gn2.forward(&conv.forward(&x)?)?)?.relu()?;
            let logits = head.forward(&x.mean(D::Minus1)?.mean(D::Minus1)?)?;
            Ok(loss::cross_entropy(&logits, &select(&labels, b)?, None)?)
        }),
    };
    check(&net, "residual CNN");
}

#[test]
fn mlp_regressor_with_mse() {
    let (varmap, taps, vb) = builder();
    let layers: Vec<Linear> = [(4, 16), (16, 16), (16, 2)]
        .iter()
        .enumerate()
        .map(|(i, &(a, b))| nn::linear(a, b, vb.pp(format!("fc{i}"))).expect("layer"))
        .collect();
    let x = random(41, &[8, 4], 2.0);
    let y = random(42, &[8, 2], 3.0);
    let net = Net {
        taps,
        varmap,
        batch: 8,
        losses: Box::new(|b| {
            let mut h = select(&x, b)?;
            for (i, l) in layers.iter().enumerate() {
                h = l.forward(&h)?;
                if i + 1 < layers.len() {
                    h = h.silu()?;
                }
            }
            Ok(loss::mse(&h, &select(&y, b)?)?)
        }),
    };
    check(&net, "MLP regressor");
}

#[test]
fn library_transformer_decoder_with_tied_head() {
    let (varmap, taps, vb) = builder();
    let config = nn::TransformerConfig {
        vocab: 17,
        context: 8,
        width: 8,
        heads: 2,
        layers: 2,
        mlp_ratio: 2,
        causal: true,
    };
    let model = nn::Transformer::new(&config, vb).expect("model");
    let head = Linear::from_vars(model.token_embedding().embeddings().clone(), None, &taps)
        .expect("tied head");
    let ids = tokens(71, 3, 8, 17);
    let net = Net {
        taps,
        varmap,
        batch: 3,
        losses: Box::new(|b| {
            let ids = select(&ids, b)?;
            let logits = head.forward(&model.forward(&ids)?)?;
            Ok(loss::next_token_cross_entropy(&logits, &ids, None)?)
        }),
    };
    check(&net, "library transformer");
}

/// The MNIST CNN (the papers' network, DP layers) on the staged and general executors
/// against the fused executor it takes by default, with the same weights: the same
/// losses, per-example norms and clipped sums (tanh and ReLU, flat and per-layer).
#[test]
fn mnist_cnn_agrees_on_every_executor() {
    use dp_mechanisms::NoiseSource;
    use dp_models::models::{mnist_cnn, Activation};
    use dp_models::nn::Executor;
    use dp_models::{Classifier, ClipRule};
    for (activation, executor) in [
        (Activation::Tanh, Executor::Staged),
        (Activation::Tanh, Executor::General),
        (Activation::Relu, Executor::Staged),
        (Activation::Relu, Executor::General),
    ] {
        let build = || mnist_cnn(activation, &mut NoiseSource::seeded(81)).expect("cnn");
        let fused = build();
        assert_eq!(
            fused.executor(),
            Executor::Fused,
            "the DP-layer CNN takes the fused executor on the CPU"
        );
        let net = build().with_executor(executor).expect("covered");
        let x = random(82, &[6, 784], 0.5).affine(1.0, 0.5).expect("x");
        let labels = [0, 3, 5, 7, 9, 1];
        for rule in [
            ClipRule::Flat { max_grad_norm: 0.5 },
            ClipRule::PerLayer { max_grad_norm: 0.5 },
        ] {
            let f = fused
                .clipped_cross_entropy_gradient(&x, &labels, 10, rule)
                .expect("fused");
            let n = net
                .clipped_cross_entropy_gradient(&x, &labels, 10, rule)
                .expect("nn");
            let what = format!("{activation:?} {executor:?} {rule:?}");
            assert!(
                super::check::relative_error(&n.losses, &f.losses) < 1e-5,
                "{what} losses"
            );
            // The DP layers' ghost norms are rigorous upper bounds (src/nn/ghost.rs).
            let (below, above) =
                super::check::one_sided_error(&n.squared_norms, &f.squared_norms, 1e-12);
            assert!(
                below < 1e-5 && above < super::check::GHOST_SLACK,
                "{what} norms: {below} below, {above} above"
            );
            // A clip factor from the ghost bound is smaller by at most half its slack.
            for (range, owner) in fused.taps().layer_ranges().into_iter().zip(0..) {
                let error = super::check::relative_error(
                    &n.sum.to_flat().expect("sum")[range.clone()],
                    &f.sum.to_flat().expect("sum")[range],
                );
                assert!(
                    error < super::check::GHOST_SLACK / 2.0,
                    "{what} layer {owner}: {error}"
                );
            }
        }
    }
}
