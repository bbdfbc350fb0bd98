//! Clipped per-example gradients of a 784 → 1000 → 10 MLP on 64 MNIST images, and the
//! sparse per-example gradient of one word2vec sample. Needs `DP_DATA_DIR` (or the cache)
//! for MNIST. Prints the parameter count, the largest per-example gradient norm before
//! clipping, and the rows a word2vec sample touches.

use dp_mechanisms::NoiseSource;
use dp_models::fused::FusedModel;
use dp_models::models::{mlp, Activation};
use dp_models::word2vec::{PairSet, SharedEmbedding, SparseGradient};
use dp_models::ClipRule;
use dp_models::PrivateModel;

fn main() -> dp_models::Result<()> {
    let mut noise = NoiseSource::seeded(7); // reproducible; not for production
    let model = FusedModel::new(mlp(784, &[1000], 10, Activation::Relu)?, &mut noise)?;
    let (train, _test) = dp_models::data::mnist()?;
    let batch: Vec<usize> = (0..64).collect();
    let clip = ClipRule::Flat { max_norm: 4.0 };
    let clipped = model.clipped_gradient(&train, &batch, clip)?;
    let largest = clipped
        .squared_norms
        .iter()
        .fold(0f32, |a, &b| a.max(b))
        .sqrt();
    println!(
        "{} parameters, largest per-example norm {largest:.3} (clipped to 4)",
        clipped.sum.len()
    );

    let embedding = SharedEmbedding::new(1000, 100, 0.1, &mut noise);
    let sample = PairSet {
        targets: vec![3],
        contexts: vec![17],
        negatives: (100..108).collect(),
        negatives_per_sample: 8,
    };
    let mut gradient = SparseGradient::default();
    let loss = embedding.example_gradient(&sample, 0, &mut gradient)?;
    println!(
        "word2vec sample: loss {loss:.4}, {} of 1000 rows touched",
        gradient.rows.len()
    );
    Ok(())
}
