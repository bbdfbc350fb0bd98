//! Per-sample gradient contributions: what one use of a layer adds to each example's
//! gradient of one parameter, and the three things the clipping needs from them — squared
//! norms (ghost or materialised), the clipped sum, and the materialised gradients.

use candle_core::{DType, Shape, Tensor};

use super::left_factor::Left;
use crate::error::{Error, Result};

/// What one use of a layer adds to each example's gradient of one parameter.
#[derive(Clone, Debug)]
pub enum Contribution {
    /// `∇ᵢ += Σₖ Lᵢₖ ⊗ Rᵢₖ` (out × in, reshaped to the parameter's shape): Linear
    /// (`L` = output gradients, `R` = inputs), Embedding (one-hot ids, output gradients),
    /// convolutions (`R` = unfolded patches), a bias (`R` = ones). Its squared norm can be
    /// had without the gradient: `⟨LLᵀ, RRᵀ⟩` (ghost clipping, Li et al. 2022).
    Outer {
        /// `L` (B, K, out).
        left: Left,
        /// `R` (B, K, in).
        right: Tensor,
    },
    /// The per-sample gradients themselves, (B, …parameter shape): normalisation scales
    /// and shifts, whose per-sample gradients are as small as the parameter.
    PerSample(Tensor),
}

/// How the squared norms of a parameter's per-sample gradients are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NormMethod {
    /// Ghost norms where they are cheaper than materialising, by the layer's shapes:
    /// `K·(out + in) < 2·out·in` (mixed ghost clipping, Bu et al. 2022, with the ghost
    /// pass's measured speed per flop).
    #[default]
    Auto,
    /// Always `⟨LLᵀ, RRᵀ⟩` where every contribution is an outer product.
    Ghost,
    /// Always materialise the per-sample gradients.
    Materialised,
}

impl Contribution {
    fn batch(&self) -> Result<usize> {
        Ok(match self {
            Contribution::Outer { right, .. } => right.dim(0)?,
            Contribution::PerSample(t) => t.dim(0)?,
        })
    }

    /// The materialised per-sample gradients (B, …shape).
    fn per_sample(&self, shape: &Shape) -> Result<Tensor> {
        let b = self.batch()?;
        let mut dims = vec![b];
        dims.extend_from_slice(shape.dims());
        Ok(match self {
            Contribution::Outer { left, right } => {
                let grads = match left {
                    Left::Dense(l) => l
                        .transpose(1, 2)?
                        .contiguous()?
                        .matmul(&right.contiguous()?)?,
                    Left::OneHot { ids, width } => {
                        // Row ids offset by example so one index_add fills all B tables.
                        let (b, k) = ids.dims2()?;
                        let offsets = Tensor::arange(0u32, b as u32, ids.device())?
                            .affine(*width as f64, 0.0)?
                            .unsqueeze(1)?;
                        let rows = ids.broadcast_add(&offsets)?.flatten_all()?;
                        let d = right.dim(2)?;
                        Tensor::zeros((b * width, d), DType::F32, right.device())?.index_add(
                            &rows,
                            &right.reshape((b * k, d))?,
                            0,
                        )?
                    }
                };
                grads.reshape(dims)?
            }
            Contribution::PerSample(t) => t.reshape(dims)?,
        })
    }

    /// `Σᵢ cᵢ ∇ᵢ` of this contribution, in the parameter's `shape`.
    fn clipped_sum(&self, factors: &Tensor, shape: &Shape) -> Result<Tensor> {
        let b = factors.dim(0)?;
        Ok(match self {
            Contribution::Outer { left, right } => {
                let (_, k, out) = left.rows()?;
                let r = right.reshape((b * k, ()))?;
                match left {
                    Left::Dense(l) if crate::cpu::applies(l) && crate::cpu::applies(right) => {
                        crate::cpu::clipped_outer_sum(l, right, &factors.to_vec1::<f32>()?)?
                    }
                    Left::Dense(l) => {
                        let scaled = l.broadcast_mul(&factors.reshape((b, 1, 1))?)?;
                        scaled.reshape((b * k, out))?.t()?.matmul(&r)?
                    }
                    Left::OneHot { ids, width } => {
                        let scaled = r.broadcast_mul(
                            &factors
                                .reshape((b, 1))?
                                .repeat((1, k))?
                                .reshape((b * k, 1))?,
                        )?;
                        Tensor::zeros((*width, r.dim(1)?), DType::F32, r.device())?.index_add(
                            &ids.flatten_all()?,
                            &scaled,
                            0,
                        )?
                    }
                }
                .reshape(shape)?
            }
            Contribution::PerSample(t) => {
                let mut dims = vec![1usize; t.rank()];
                dims[0] = b;
                t.broadcast_mul(&factors.reshape(dims)?)?
                    .sum(0)?
                    .reshape(shape)?
            }
        })
    }

    /// The contribution with the examples where `keep` (B,) is 0 zeroed, so that a
    /// non-finite example cannot spread NaN into the sums through a zero factor.
    fn masked(&self, keep: &Tensor) -> Result<Contribution> {
        let zero_rows = |t: &Tensor| zero_rows(t, keep);
        Ok(match self {
            Contribution::Outer { left, right } => Contribution::Outer {
                left: match left {
                    Left::Dense(l) => Left::Dense(zero_rows(l)?),
                    one_hot => one_hot.clone(),
                },
                right: zero_rows(right)?,
            },
            Contribution::PerSample(t) => Contribution::PerSample(zero_rows(t)?),
        })
    }
}

/// `t` (B, …) with the rows where `keep` (B,) is 0 set to zero (not multiplied: the rows
/// may hold NaN).
fn zero_rows(t: &Tensor, keep: &Tensor) -> Result<Tensor> {
    let mut dims = vec![1usize; t.rank()];
    dims[0] = keep.dim(0)?;
    let mask = keep.reshape(dims)?.broadcast_as(t.shape())?.ne(0.0)?;
    Ok(mask.where_cond(t, &t.zeros_like()?)?)
}

/// The per-sample gradients of one parameter of `shape` from all its contributions.
pub(crate) fn per_sample(contributions: &[Contribution], shape: &Shape) -> Result<Tensor> {
    let mut total: Option<Tensor> = None;
    for c in contributions {
        let g = c.per_sample(shape)?;
        total = Some(match total {
            None => g,
            Some(t) => (t + g)?,
        });
    }
    total.ok_or_else(|| Error::invalid_model("DP layer", "a parameter without contributions"))
}

/// Most floats of materialised per-sample gradients kept between the norm and the
/// clipped-sum passes, over all of a network's parameters together (512 MiB); a
/// parameter that does not fit in what is left has its clipped sum recomputed.
pub(super) const KEPT_PER_SAMPLE_BUDGET: usize = 128 << 20;

/// The squared norms of one parameter's per-sample gradients, and those gradients (B, P)
/// where they were materialised and are small enough to keep for the clipped sum.
pub(crate) struct Norms {
    /// `‖∇ᵢ‖²` (B,).
    pub(crate) squared: Tensor,
    /// The materialised per-sample gradients, flattened to (B, P).
    pub(super) kept: Option<Tensor>,
}

/// `‖∇ᵢ‖²` (B,) of one parameter of `shape`, by ghost norms or materialisation; the
/// materialised gradients are kept when they fit in `keep_budget` floats.
pub(crate) fn squared_norms(
    contributions: &[Contribution],
    shape: &Shape,
    method: NormMethod,
    keep_budget: usize,
) -> Result<Norms> {
    let outers: Option<Vec<(&Left, &Tensor)>> = contributions
        .iter()
        .map(|c| match c {
            Contribution::Outer { left, right } => Some((left, right)),
            Contribution::PerSample(_) => None,
        })
        .collect();
    let batch = contributions.first().map_or(Ok(0), Contribution::batch)?;
    let fits = batch * shape.elem_count() <= keep_budget;
    let ghost = match (&outers, method) {
        (None, _) | (_, NormMethod::Materialised) => false,
        (Some(_), NormMethod::Ghost) => true,
        (Some(o), NormMethod::Auto) => ghost_is_cheaper(o, fits && all_dense(o))?,
    };
    match outers {
        Some(o) if ghost => Ok(Norms {
            squared: super::ghost::ghost_norms(&o)?,
            kept: None,
        }),
        Some(o) if fits => {
            if let Some(dense) = dense_on_cpu(&o) {
                let (grads, squared) = crate::cpu::outer_per_sample(&dense)?;
                return Ok(Norms {
                    squared,
                    kept: Some(grads),
                });
            }
            materialised(contributions, shape, fits)
        }
        _ => materialised(contributions, shape, fits),
    }
}

/// Whether every use's left factor is dense (one-hot Gram matrices cost no flops, so the
/// kept rule does not apply to them).
fn all_dense(outers: &[(&Left, &Tensor)]) -> bool {
    outers
        .iter()
        .all(|(left, _)| matches!(left, Left::Dense(_)))
}

/// Every use's `(L, R)` where all are dense f32 on the CPU (one pass per example there).
fn dense_on_cpu<'a>(outers: &[(&'a Left, &'a Tensor)]) -> Option<Vec<(&'a Tensor, &'a Tensor)>> {
    outers
        .iter()
        .map(|(left, right)| match left {
            Left::Dense(l) if crate::cpu::applies(l) && crate::cpu::applies(right) => {
                Some((l, *right))
            }
            _ => None,
        })
        .collect()
}

/// The materialised per-sample gradients' squared norms, and the gradients if `keep`.
fn materialised(contributions: &[Contribution], shape: &Shape, keep: bool) -> Result<Norms> {
    let grads = per_sample(contributions, shape)?.flatten_from(1)?;
    let squared = grads.sqr()?.sum(1)?;
    Ok(Norms {
        squared,
        kept: keep.then_some(grads),
    })
}

/// How many times cheaper per flop the ghost pass runs than materialisation: the two
/// Gram matrices are large GEMMs (`cpu::ghost_sums` on the CPU) where the per-sample
/// gradients are B small ones of depth K, so at equal flops the ghost pass wins. Measured
/// on the transformer bench (d 256, T 128: the attention projections sit exactly at
/// `K·(out + in) = out·in`): ghost there took the private step 876 / 846 → 789 / 761 ms
/// (`cargo xtask bench transformer`, docs/training.md).
const GHOST_FLOP_ADVANTAGE: usize = 2;

/// Flops of Gram matrices per gradient entry above which materialised gradients that
/// are kept for the clipped sum beat ghost norms: kept, the per-sample gradients cost what
/// the book-keeping clipped sum they replace costs, so the ghost pass's `K²·(out + in)`
/// flops per example are saved against writing and reading `out·in` floats. Chosen, not
/// tuned: the transformer bench's uses (80–128 Gram flops per entry) are the only ones
/// measured (docs/training.md).
const KEPT_ENTRY_COST: usize = 16;

/// Whether ghost norms are cheaper for these uses (K the rows of all uses together).
/// Without keeping: `K·(out + in) < 2·out·in`, the ghost norm's `K²·(out + in)` flops per
/// example against materialisation's `K·out·in`, weighted by [`GHOST_FLOP_ADVANTAGE`].
/// With the gradients kept (`kept`): `K²·(out + in) < 16·out·in` ([`KEPT_ENTRY_COST`]).
fn ghost_is_cheaper(outers: &[(&Left, &Tensor)], kept: bool) -> Result<bool> {
    let mut k = 0;
    let (mut out, mut inp) = (0, 0);
    for (left, right) in outers {
        let (_, kl, o) = left.rows()?;
        k += kl;
        out = o;
        inp = right.dim(2)?;
    }
    Ok(if kept {
        k * k * (out + inp) < KEPT_ENTRY_COST * out * inp
    } else {
        k * (out + inp) < GHOST_FLOP_ADVANTAGE * out * inp
    })
}

/// `Σᵢ cᵢ ∇ᵢ` of one parameter from its kept per-sample gradients (B, P) — one
/// weighted row sum — or else from all its contributions; the examples where `keep` is 0
/// are removed first.
pub(crate) fn clipped_sum(
    contributions: &[Contribution],
    kept: Option<&Tensor>,
    factors: &Tensor,
    keep: Option<&Tensor>,
    shape: &Shape,
) -> Result<Tensor> {
    if let Some(grads) = kept {
        if crate::cpu::applies(grads) && crate::cpu::applies(factors) {
            // Rows with a zero factor are skipped, not scaled: so are those `keep` drops.
            let factors = match keep {
                Some(keep) => (factors * keep)?,
                None => factors.clone(),
            };
            let sum = grads.apply_op2_no_bwd(
                &factors.contiguous()?,
                &crate::cpu::WeightedRowSum { trailing: 0 },
            )?;
            return Ok(sum.reshape(shape)?);
        }
        let grads = match keep {
            Some(keep) => zero_rows(grads, keep)?,
            None => grads.clone(),
        };
        let b = factors.dim(0)?;
        return Ok(factors.reshape((1, b))?.matmul(&grads)?.reshape(shape)?);
    }
    let mut total: Option<Tensor> = None;
    for c in contributions {
        let s = match keep {
            Some(keep) => c.masked(keep)?.clipped_sum(factors, shape)?,
            None => c.clipped_sum(factors, shape)?,
        };
        total = Some(match total {
            None => s,
            Some(t) => (t + s)?,
        });
    }
    total.ok_or_else(|| Error::invalid_model("DP layer", "a parameter without contributions"))
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::{ghost_is_cheaper, Left};

    /// Whether ghost norms are chosen for one use of K rows of a layer `inp → out`.
    fn ghost_for(k: usize, inp: usize, out: usize) -> bool {
        ghost_if(k, inp, out, false)
    }

    /// The same, with the materialised gradients kept (`kept`) or recomputed.
    fn ghost_if(k: usize, inp: usize, out: usize, kept: bool) -> bool {
        let left = Left::Dense(Tensor::zeros((1, k, out), DType::F32, &Device::Cpu).expect("L"));
        let right = Tensor::zeros((1, k, inp), DType::F32, &Device::Cpu).expect("R");
        ghost_is_cheaper(&[(&left, &right)], kept).expect("shapes")
    }

    /// Kept gradients save the Gram matrices' `K²·(out + in)` flops per example, so they
    /// win while those exceed 16 per gradient entry.
    #[test]
    fn kept_gradients_are_chosen_above_sixteen_gram_flops_per_entry() {
        // The transformer bench's projections and MLP at T 128: kept.
        assert!(!ghost_if(128, 256, 256, true));
        assert!(!ghost_if(128, 256, 1024, true));
        // One row per example, or a few against wide layers: ghost.
        assert!(ghost_if(1, 784, 128, true));
        assert!(ghost_if(8, 512, 512, true));
        // The boundary at 16 × 16: K²·32 against 16·256, kept from K = 12.
        assert!(ghost_if(11, 16, 16, true));
        assert!(!ghost_if(12, 16, 16, true));
    }

    /// The rule's boundary: ghost norms while `K·(out + in) < 2·out·in`.
    #[test]
    fn ghost_norms_are_chosen_below_twice_the_materialised_cost() {
        // The transformer bench's attention projections (K = T = 128, d 256) and MLP.
        assert!(ghost_for(128, 256, 256));
        assert!(ghost_for(128, 256, 1024));
        // Exactly at the boundary (d 128, T 128) and above it: materialised.
        assert!(!ghost_for(128, 128, 128));
        assert!(!ghost_for(512, 256, 256));
        // One row per example (an MLP on flat inputs): always ghost.
        assert!(ghost_for(1, 8, 8));
    }
}
