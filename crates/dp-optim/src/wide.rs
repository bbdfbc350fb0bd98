//! Training word2vec privately as the Wide-network paper does
//! (`docs/reproduction/wide.md`, "Algorithms 2 and 3, reconstructed"): DP-SGD with Adam, and sparse DP-SGD that
//! privately selects the largest coordinates of the clipped gradient sum and adds noise
//! only there.
//!
//! Per-example gradients are sparse (each sample touches its target, context and
//! negative rows), so a step costs O(batch × rows × dim) for the gradients plus O(p) for
//! the noise, the selection and Adam — never a dense gradient per example.

use dp_accounting::{DpEvent, SamplingScheme};
use dp_mechanisms::{
    BudgetSplit, GaussianMechanism, Mechanism, NoiseSource, SparseVariant, SparseVector, TopK,
    TopKMethod,
};
use dp_models::word2vec::{PairSet, SharedEmbedding, SparseGradient};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::optimizer::Optimizer;
use crate::sampler::{Sampler, ShuffleState};
use crate::validate;

/// How the coordinates that get noise are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum CoordinateSelection {
    /// The exponential mechanism's top-k on |G_j| (one-shot Gumbel, Durfee & Rogers
    /// 2019), ε per step split evenly over the k rounds.
    ExponentialTopK {
        /// ε of one step's whole selection.
        epsilon: f64,
    },
    /// The sparse vector technique (Dwork & Roth Alg. 2, δ = 0) on |G_j| in coordinate
    /// order, cutoff k: the first k coordinates whose noisy magnitude clears the noisy
    /// threshold.
    SparseVector {
        /// ε of one step's run.
        epsilon: f64,
        /// The threshold on |G_j|.
        threshold: f64,
    },
}

/// Which algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum WideMethod {
    /// Adam on the mean gradient, no clipping, no noise.
    NonPrivate,
    /// DP-SGD (Adam): Σ clip_{S₁}(gᵢ) + N(0, σ²S₁² I) on every coordinate.
    DpSgd {
        /// σ > 0: the noise standard deviation over S₁.
        noise_multiplier: f64,
    },
    /// Sparse DP-SGD: select k = ⌈γp⌉ coordinates of |Σ clip_{S₁}(gᵢ)|, re-clip each
    /// example's gradient restricted to them at S₂, add N(0, σ²S₂²) there only.
    Sparse {
        /// σ > 0: the noise standard deviation over S₂.
        noise_multiplier: f64,
        /// γ ∈ (0, 1]: the fraction of coordinates selected each step (k = ⌈γp⌉).
        fraction: f64,
        /// S₂ > 0: the norm each example is re-clipped to on the selected support.
        second_clip: f64,
        /// The selection mechanism.
        selection: CoordinateSelection,
    },
}

/// Everything a wide run needs besides the model and data.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct WideConfig {
    /// Poisson rate q = b/n.
    pub sampling_rate: f64,
    /// S₁ > 0: the per-example clipping norm.
    pub clip: f64,
    /// The algorithm.
    pub method: WideMethod,
    /// Adam's η.
    pub lr: f64,
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WideStep {
    /// Realised batch size.
    pub batch_size: usize,
    /// Mean loss over the batch (NaN when empty).
    pub mean_loss: f64,
    /// Coordinates that received a (noisy) gradient.
    pub updated_coordinates: usize,
}

/// The trainer: model, Adam moments, noise source, counters.
pub struct WideTrainer {
    model: SharedEmbedding,
    config: WideConfig,
    n: usize,
    noise: NoiseSource,
    optimizer: Optimizer,
    moments: Vec<Vec<f32>>,
    steps: u64,
    batch: Vec<usize>,
    gradients: Vec<SparseGradient>,
    sum: Vec<f32>,
    selected: Vec<bool>,
    k: usize,
}

impl WideTrainer {
    /// A trainer for `n` training samples.
    pub fn new(
        model: SharedEmbedding,
        config: WideConfig,
        n: usize,
        noise: NoiseSource,
    ) -> Result<Self> {
        Sampler::Poisson {
            sampling_rate: config.sampling_rate,
        }
        .validate(n)?;
        let positive = |name, v| validate::positive(name, v).map(drop);
        positive("clip", config.clip)?;
        positive("lr", config.lr)?;
        let p = model.num_params();
        let mut k = 0;
        match config.method {
            WideMethod::NonPrivate => {}
            WideMethod::DpSgd { noise_multiplier } => {
                positive("noise multiplier", noise_multiplier)?
            }
            WideMethod::Sparse {
                noise_multiplier,
                fraction,
                second_clip,
                selection,
            } => {
                positive("noise multiplier", noise_multiplier)?;
                positive("second clip", second_clip)?;
                validate::rate("fraction", fraction)?;
                k = ((fraction * p as f64).ceil() as usize).clamp(1, p);
                match selection {
                    CoordinateSelection::ExponentialTopK { epsilon } => {
                        positive("selection epsilon", epsilon)?
                    }
                    CoordinateSelection::SparseVector { epsilon, threshold } => {
                        positive("selection epsilon", epsilon)?;
                        if !threshold.is_finite() {
                            return Err(Error::InvalidConfig(
                                "the threshold must be finite".into(),
                            ));
                        }
                    }
                }
            }
        }
        // Adam as the Wide paper's runs use it, TF's defaults.
        let optimizer = Optimizer::Adam {
            lr: config.lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        };
        Ok(WideTrainer {
            config,
            n,
            noise,
            optimizer,
            moments: optimizer.initial_moments(p),
            steps: 0,
            batch: Vec::new(),
            gradients: Vec::new(),
            sum: vec![0.0; p],
            selected: vec![false; p],
            k,
            model,
        })
    }

    /// The model.
    pub fn model(&self) -> &SharedEmbedding {
        &self.model
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Coordinates selected per sparse step (0 for dense methods).
    pub fn selected_per_step(&self) -> usize {
        self.k
    }

    /// The mechanism that selects, for sparse steps.
    fn selection(&self) -> Result<Option<Selector>> {
        let WideMethod::Sparse { selection, .. } = self.config.method else {
            return Ok(None);
        };
        // One example moves each |G_j| by at most S₁ (‖clip(g)‖₂ ≤ S₁ bounds every
        // coordinate), up or down: sensitivity S₁, not monotone.
        let s1 = self.config.clip;
        Ok(Some(match selection {
            CoordinateSelection::ExponentialTopK { epsilon } => Selector::TopK(TopK::new(
                s1,
                epsilon,
                self.k,
                false,
                TopKMethod::OneShotGumbel,
                BudgetSplit::Basic,
            )?),
            CoordinateSelection::SparseVector { epsilon, threshold } => Selector::Sparse(
                SparseVector::new(SparseVariant::Sparse, s1, threshold, self.k, epsilon, 0.0)?,
            ),
        }))
    }

    /// The privacy event of one step (`None` for non-private training): Poisson sampling
    /// of the Gaussian on the noised coordinates composed with the selection, since both
    /// read the same batch (accounted jointly by the RDP accountant's general
    /// Poisson-sampling bound; the Gaussian alone is exact).
    pub fn step_event(&self) -> Result<Option<DpEvent>> {
        let scheme = SamplingScheme::Poisson {
            sampling_rate: self.config.sampling_rate,
        };
        Ok(match self.config.method {
            WideMethod::NonPrivate => None,
            WideMethod::DpSgd { noise_multiplier } => {
                Some(scheme.amplify(DpEvent::gaussian(noise_multiplier)))
            }
            WideMethod::Sparse {
                noise_multiplier, ..
            } => {
                let selection = match self.selection()? {
                    Some(Selector::TopK(t)) => t.event(),
                    Some(Selector::Sparse(s)) => s.event(),
                    None => DpEvent::NoOp,
                };
                Some(scheme.amplify(DpEvent::Composed {
                    events: vec![DpEvent::gaussian(noise_multiplier), selection],
                }))
            }
        })
    }

    /// One step on `data` (which must have the `n` samples the trainer was built for).
    pub fn step(&mut self, data: &PairSet) -> Result<WideStep> {
        if data.len() != self.n {
            return Err(Error::InvalidConfig(format!(
                "the trainer was built for {} samples, got {}",
                self.n,
                data.len()
            )));
        }
        let mean_loss = self.batch_gradients(data)?;
        let b = self.batch.len();
        self.clipped_sum();
        let updated = match self.config.method {
            WideMethod::NonPrivate => self.sum.len(),
            WideMethod::DpSgd { noise_multiplier } => {
                GaussianMechanism::new(self.config.clip, noise_multiplier)?
                    .release_in_place_f32(&mut self.sum, &mut self.noise);
                self.sum.len()
            }
            WideMethod::Sparse {
                noise_multiplier,
                second_clip,
                ..
            } => self.sparse_release(noise_multiplier, second_clip)?,
        };
        if let Some(bad) = self.sum.iter().position(|v| !v.is_finite()) {
            return Err(Error::UnprotectedParameter(format!(
                "coordinate {bad} has a non-finite gradient"
            )));
        }
        // Private runs divide by the expected batch size (a post-processing of the noisy
        // sum); non-private ones by the realised size.
        let private = self.config.method != WideMethod::NonPrivate;
        let divisor = if private {
            self.config.sampling_rate * self.n as f64
        } else {
            b as f64
        };
        if divisor >= 1.0 || private {
            let scale = (1.0 / divisor.max(1e-12)) as f32;
            self.sum.iter_mut().for_each(|v| *v *= scale);
            self.adam();
        }
        self.steps += 1;
        Ok(WideStep {
            batch_size: b,
            mean_loss,
            updated_coordinates: updated,
        })
    }

    /// Draws a Poisson batch and computes each example's sparse gradient; the batch's
    /// mean loss (NaN when empty; not covered by ε).
    fn batch_gradients(&mut self, data: &PairSet) -> Result<f64> {
        let sampler = Sampler::Poisson {
            sampling_rate: self.config.sampling_rate,
        };
        sampler.draw(
            self.n,
            &mut self.noise,
            &mut ShuffleState::default(),
            &mut self.batch,
        );
        let b = self.batch.len();
        self.gradients.resize_with(b, SparseGradient::default);
        let mut loss_sum = 0.0;
        for (slot, &i) in self.batch.iter().enumerate() {
            loss_sum += self
                .model
                .example_gradient(data, i, &mut self.gradients[slot])?;
        }
        Ok(if b == 0 {
            f64::NAN
        } else {
            loss_sum / b as f64
        })
    }

    /// `self.sum` ← Σ clip_{S₁}(gᵢ) (Σ gᵢ without privacy), accumulated row by row; the
    /// batch's gradients are left clipped.
    fn clipped_sum(&mut self) {
        let (d, b) = (self.model.dim(), self.batch.len());
        self.sum.iter_mut().for_each(|v| *v = 0.0);
        let private = self.config.method != WideMethod::NonPrivate;
        let s1 = self.config.clip;
        for g in &mut self.gradients[..b] {
            let norm = g.squared_norm().sqrt();
            let factor = if !private {
                1.0
            } else if norm.is_finite() {
                (s1 / norm).min(1.0) as f32
            } else {
                0.0
            };
            g.values.iter_mut().for_each(|v| *v *= factor);
            for (slot, &r) in g.rows.iter().enumerate() {
                let dst = &mut self.sum[r as usize * d..(r as usize + 1) * d];
                dst.iter_mut()
                    .zip(&g.values[slot * d..(slot + 1) * d])
                    .for_each(|(s, &v)| *s += v);
            }
        }
    }

    /// Sparse DP-SGD's release: the private selection of k coordinates of |Σ clip(gᵢ)|,
    /// each example's gradient re-clipped at S₂ on that support and summed there, and
    /// `N(0, σ²S₂²)` on the selected coordinates only; the number selected.
    fn sparse_release(&mut self, noise_multiplier: f64, second_clip: f64) -> Result<usize> {
        let scores: Vec<f64> = self.sum.iter().map(|&v| f64::from(v.abs())).collect();
        let chosen = match self.selection()? {
            Some(Selector::TopK(t)) => t.select(&scores, &mut self.noise)?,
            Some(Selector::Sparse(s)) => s.release_largest_magnitudes(&scores, &mut self.noise)?,
            None => Vec::new(),
        };
        self.selected.iter_mut().for_each(|s| *s = false);
        chosen.iter().for_each(|&j| self.selected[j] = true);
        self.sum.iter_mut().for_each(|v| *v = 0.0);
        let (d, b) = (self.model.dim(), self.batch.len());
        for g in &self.gradients[..b] {
            let on_support = |slot: usize, r: u32| {
                g.values[slot * d..(slot + 1) * d]
                    .iter()
                    .enumerate()
                    .map(move |(c, &v)| (r as usize * d + c, v))
            };
            let restricted: f64 = g
                .rows
                .iter()
                .enumerate()
                .flat_map(|(slot, &r)| on_support(slot, r))
                .filter(|&(j, _)| self.selected[j])
                .fold(0.0f64, |acc, (_, v)| acc + f64::from(v) * f64::from(v));
            let factor = (second_clip / restricted.sqrt()).min(1.0) as f32;
            for (slot, &r) in g.rows.iter().enumerate() {
                for (j, v) in on_support(slot, r) {
                    if self.selected[j] {
                        self.sum[j] += factor * v;
                    }
                }
            }
        }
        let std = noise_multiplier * second_clip;
        for &j in &chosen {
            self.sum[j] += (std * self.noise.standard_normal()) as f32;
        }
        Ok(chosen.len())
    }

    /// Adam (β₁ 0.9, β₂ 0.999, ε 1e-8, bias-corrected) on `self.sum`, with the
    /// optimiser kernel every algorithm uses.
    fn adam(&mut self) {
        let (weights, moments) = (self.model.weights_mut(), &mut self.moments);
        self.optimizer
            .update(weights, moments, &self.sum, self.steps + 1);
    }

    /// The coordinates the last sparse step selected (empty for dense methods).
    pub fn last_selection(&self) -> Vec<usize> {
        self.selected
            .iter()
            .enumerate()
            .filter_map(|(j, &s)| s.then_some(j))
            .collect()
    }

    /// The last step's gradient (noisy, divided by the batch size) as applied by Adam.
    pub fn last_gradient(&self) -> &[f32] {
        &self.sum
    }
}

enum Selector {
    TopK(TopK),
    Sparse(SparseVector),
}
