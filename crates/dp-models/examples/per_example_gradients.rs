//! Clipped per-example gradients of a 784 → 1000 → 10 MLP on 64 MNIST images. Needs
//! `DP_DATA_DIR` (or the cache) for MNIST. Prints the parameter count, the largest
//! per-example gradient norm before clipping, the batch's mean loss and the norm of the
//! clipped sum.

use dp_mechanisms::NoiseSource;
use dp_models::models::{mlp, Activation};
use dp_models::ClipRule;
use dp_models::PrivateModel;

fn main() -> dp_models::Result<()> {
    let mut noise = NoiseSource::seeded(7); // reproducible; not for production
    let model = mlp(784, &[1000], 10, Activation::Relu, &mut noise)?;
    let (train, _test) = dp_models::data::mnist()?;
    let batch: Vec<usize> = (0..64).collect();
    let clip = ClipRule::Flat { max_grad_norm: 4.0 };
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

    let mean_loss = clipped.losses.iter().sum::<f32>() / clipped.losses.len() as f32;
    let sum_norm = clipped
        .sum
        .to_flat()?
        .iter()
        .map(|g| g * g)
        .sum::<f32>()
        .sqrt();
    println!(
        "mean loss {mean_loss:.4}; the clipped sum has norm {sum_norm:.3} (at most 64 × 4 = 256)"
    );
    Ok(())
}
