//! The word2vec samples on the Brown corpus, sparse per-example gradients against
//! Candle autograd, and canary ranks against brute force.

use candle_core::{Device, Tensor, Var};
use dp_mechanisms::NoiseSource;
use dp_models::data::load_brown;
use dp_papers::wide::word2vec::{
    build_word2vec_data, insert_canaries, random_canaries, CanaryRanker, CorpusConfig,
    NoiseDistribution, PairSet, SharedEmbedding, SparseGradient,
};

/// The real corpus (CI sets DP_DATA_DIR): 500 documents, and the paper's 200K / 100K /
/// 200K samples over a 1,000-word vocabulary without stop words.
#[test]
fn real_brown_yields_the_papers_sample_counts() -> dp_models::Result<()> {
    let Some(locator) = crate::real_data::locator("the real-data check") else {
        return Ok(());
    };
    let documents = load_brown(&locator)?;
    assert_eq!(documents.len(), 500);
    let data = build_word2vec_data(&documents, &CorpusConfig::WIDE_PAPER)?;
    assert_eq!(data.vocabulary.len(), 1000);
    assert!(!data.vocabulary.iter().any(|w| w == "the" || w == "of"));
    assert_eq!(
        (data.train.len(), data.validation.len(), data.test.len()),
        (200_000, 100_000, 200_000)
    );
    assert_eq!(data.train.negatives.len(), 200_000 * 8);
    // Deterministic under the seed.
    let again = build_word2vec_data(&documents, &CorpusConfig::WIDE_PAPER)?;
    assert_eq!(again.train, data.train);
    Ok(())
}

fn tiny_pairs() -> PairSet {
    PairSet {
        targets: vec![0, 2, 3],
        contexts: vec![1, 2, 0],
        negatives: vec![2, 4, 0, 0, 1, 3, 3, 4, 1],
        negatives_per_sample: 3,
    }
}

/// Sparse per-example gradients equal Candle autograd's dense gradient of the same loss,
/// including repeated words (a target equal to its context, a repeated negative).
#[test]
fn sparse_example_gradients_equal_dense_autograd() -> dp_models::Result<()> {
    let (v, d) = (5, 4);
    let model = SharedEmbedding::new(v, d, 0.5, &mut NoiseSource::seeded(1));
    let pairs = tiny_pairs();
    let mut sparse = SparseGradient::default();
    for i in 0..pairs.len() {
        let loss = model.example_gradient(&pairs, i, &mut sparse)?;
        let mut rows = sparse.rows.clone();
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(rows.len(), sparse.rows.len(), "rows are distinct");
        let e = Var::from_tensor(&Tensor::from_slice(model.weights(), (v, d), &Device::Cpu)?)?;
        let row = |w: u32| e.as_tensor().get(w as usize);
        let t = row(pairs.targets[i])?;
        let dot = |a: &Tensor, b: &Tensor| (a * b).and_then(|p| p.sum_all());
        let log_sig = |x: Tensor| -> candle_core::Result<Tensor> {
            // log σ(x) = −log(1 + e^{−x})
            x.neg()?.exp()?.affine(1.0, 1.0)?.log()?.neg()
        };
        let mut total = log_sig(dot(&t, &row(pairs.contexts[i])?)?)?.neg()?;
        for &n in pairs.negatives_of(i) {
            total = (total - log_sig(dot(&t, &row(n)?)?.neg()?)?)?;
        }
        let dense_loss = total.to_scalar::<f32>()?;
        assert!(
            (f64::from(dense_loss) - loss).abs() < 1e-5,
            "{dense_loss} vs {loss}"
        );
        let grads = total.backward()?;
        let dense: Vec<f32> = grads
            .get(e.as_tensor())
            .expect("gradient")
            .flatten_all()?
            .to_vec1()?;
        let mut rebuilt = vec![0.0f32; v * d];
        for (slot, &r) in sparse.rows.iter().enumerate() {
            rebuilt[r as usize * d..(r as usize + 1) * d]
                .copy_from_slice(&sparse.values[slot * d..(slot + 1) * d]);
        }
        for (a, b) in rebuilt.iter().zip(&dense) {
            assert!((a - b).abs() < 1e-5, "sample {i}: {rebuilt:?} vs {dense:?}");
        }
        let norm: f64 = dense.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        assert!((sparse.squared_norm() - norm).abs() < 1e-6 * norm.max(1.0));
    }
    Ok(())
}

/// Canary ranks from the Gram-matrix fast path equal a brute-force ranking that scores
/// every phrase with `log_probability` directly.
#[test]
fn canary_ranks_match_brute_force_on_a_tiny_vocabulary() -> dp_models::Result<()> {
    let (v, d) = (7usize, 3usize);
    let model = SharedEmbedding::new(v, d, 1.0, &mut NoiseSource::seeded(2));
    let canaries = random_canaries(v, 6, 1, &mut NoiseSource::seeded(3));
    let ranked = CanaryRanker::new(&model).rank(&canaries)?;
    for (canary, got) in canaries.iter().zip(&ranked) {
        let [c0, c1, c2] = canary.words;
        let perplexity = |a: u32, b: u32| -> dp_models::Result<f64> {
            Ok(-model.log_probability(a, &[c0])? - model.log_probability(b, &[c0, a])?)
        };
        let own = perplexity(c1, c2)?;
        assert!((own - got.log_perplexity).abs() < 1e-9);
        let mut below = 0;
        for a in 0..v as u32 {
            for b in 0..v as u32 {
                if a != b && perplexity(a, b)? < own - 1e-12 {
                    below += 1;
                }
            }
        }
        assert_eq!(got.rank, below + 1, "{canary:?}");
        let references = (v * (v - 1)) as f64;
        assert!((got.exposure - (references.log2() - ((below + 1) as f64).log2())).abs() < 1e-12);
    }
    Ok(())
}

/// Each copy of a canary adds its six ordered pairs (window 4), with negatives never equal
/// to the target when another word exists.
#[test]
fn canaries_are_inserted_as_their_pairs() -> dp_models::Result<()> {
    let noise = NoiseDistribution::from_counts(&[5, 3, 2, 1, 1])?;
    let mut train = PairSet {
        negatives_per_sample: 8,
        ..PairSet::default()
    };
    let mut rng = NoiseSource::seeded(4);
    let canaries = random_canaries(5, 2, 3, &mut rng);
    insert_canaries(&mut train, &canaries, 4, &noise, &mut rng);
    assert_eq!(train.len(), 2 * 3 * 6);
    for i in 0..train.len() {
        assert!(train.negatives_of(i).iter().all(|&n| n != train.targets[i]));
    }
    Ok(())
}
