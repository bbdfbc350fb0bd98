//! The GDP paper's neural collaborative filtering model for MovieLens
//! (`docs/reproduction/gdp.md`, "Experiment settings", adapted by the authors from He et al. 2017): a GMF part
//! (user ⊙ item embeddings of width 5) and an MLP part without hidden layers (user and
//! item embeddings of width 10, concatenated), joined (25) into a Dense(5) softmax.
//!
//! Each example touches one row of each of the four tables, so its gradient is sparse
//! and closed-form; the model computes per-example gradients, norms and clipped sums
//! directly on the CPU (no Candle autograd), with the same fail-closed contract as the
//! other tiers: one clipped sum covering every parameter, non-finite examples zeroed.

use std::sync::RwLock;

use candle_core::Tensor;
use dp_mechanisms::NoiseSource;

use dp_models::data::Dataset;
use dp_models::loss::cross_entropy;
use dp_models::ClipRule;
use dp_models::{clipped_gradient_of_batch, Classifier, ClippedGradient, PrivateModel};
use dp_models::{Error, Result};

/// Widths of the NCF model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcfShape {
    /// Number of users.
    pub users: usize,
    /// Number of items.
    pub items: usize,
    /// GMF embedding width (5 in the paper's code).
    pub gmf_dim: usize,
    /// MLP-part embedding width (10).
    pub mlp_dim: usize,
    /// Output classes (5 rating levels).
    pub classes: usize,
}

impl NcfShape {
    /// The joined feature width `gmf + 2·mlp`.
    fn joined(&self) -> usize {
        self.gmf_dim + 2 * self.mlp_dim
    }

    /// Parameter offsets: user GMF, item GMF, user MLP, item MLP, W (classes × joined), b.
    fn offsets(&self) -> [usize; 7] {
        let mut o = [0; 7];
        let sizes = [
            self.users * self.gmf_dim,
            self.items * self.gmf_dim,
            self.users * self.mlp_dim,
            self.items * self.mlp_dim,
            self.classes * self.joined(),
            self.classes,
        ];
        for (i, s) in sizes.iter().enumerate() {
            o[i + 1] = o[i] + s;
        }
        o
    }

    /// The number of parameters (146,320 for MovieLens-1M's 6,040 users and 3,706 items).
    pub fn num_params(&self) -> usize {
        self.offsets()[6]
    }
}

/// The NCF model (parameters flat, in the order of [`NcfShape`]'s tables).
pub struct NcfModel {
    shape: NcfShape,
    theta: RwLock<Vec<f32>>,
}

/// One example's forward quantities.
struct Forward {
    user: usize,
    item: usize,
    joined: Vec<f32>,
    logits: Vec<f32>,
}

impl NcfModel {
    /// Initialised like Keras: embeddings U(−0.05, 0.05), the dense layer Glorot-uniform,
    /// bias 0, all from `noise`.
    pub fn new(shape: NcfShape, noise: &mut NoiseSource) -> Result<Self> {
        if shape.users == 0 || shape.items == 0 || shape.classes == 0 {
            return Err(Error::invalid_model(
                "NCF",
                format!("empty NCF shape {shape:?}"),
            ));
        }
        let o = shape.offsets();
        let mut theta = vec![0.0f32; shape.num_params()];
        for v in &mut theta[..o[4]] {
            *v = ((2.0 * noise.uniform() - 1.0) * 0.05) as f32;
        }
        let bound = (6.0 / (shape.joined() + shape.classes) as f64).sqrt();
        for v in &mut theta[o[4]..o[5]] {
            *v = ((2.0 * noise.uniform() - 1.0) * bound) as f32;
        }
        Ok(NcfModel {
            shape,
            theta: RwLock::new(theta),
        })
    }

    /// The model's widths.
    pub fn shape(&self) -> NcfShape {
        self.shape
    }

    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, Vec<f32>>> {
        self.theta
            .read()
            .map_err(|_| Error::invalid_model("NCF", "NCF parameters poisoned"))
    }

    fn ids(&self, x: &Tensor) -> Result<Vec<(usize, usize)>> {
        let (_, width) = x.dims2()?;
        if width != 2 {
            return Err(Error::invalid_model(
                "NCF",
                format!("NCF input has {width} columns, expected [user, item]"),
            ));
        }
        let flat: Vec<f32> = x.flatten_all()?.to_vec1()?;
        flat.chunks(2)
            .map(|p| {
                let (u, i) = (p[0] as usize, p[1] as usize);
                if p[0] < 0.0 || p[1] < 0.0 || u >= self.shape.users || i >= self.shape.items {
                    Err(Error::invalid_model(
                        "NCF",
                        format!(
                            "NCF ids ({}, {}) outside {} users × {} items",
                            p[0], p[1], self.shape.users, self.shape.items
                        ),
                    ))
                } else {
                    Ok((u, i))
                }
            })
            .collect()
    }

    fn forward_one(&self, theta: &[f32], user: usize, item: usize) -> Forward {
        let s = self.shape;
        let o = s.offsets();
        let (g, m, j) = (s.gmf_dim, s.mlp_dim, s.joined());
        let mut joined = Vec::with_capacity(j);
        let ug = &theta[o[0] + user * g..][..g];
        let ig = &theta[o[1] + item * g..][..g];
        joined.extend(ug.iter().zip(ig).map(|(a, b)| a * b));
        joined.extend_from_slice(&theta[o[2] + user * m..][..m]);
        joined.extend_from_slice(&theta[o[3] + item * m..][..m]);
        let w = &theta[o[4]..o[5]];
        let b = &theta[o[5]..o[6]];
        let logits = (0..s.classes)
            .map(|k| {
                b[k] + w[k * j..][..j]
                    .iter()
                    .zip(&joined)
                    .map(|(a, z)| a * z)
                    .sum::<f32>()
            })
            .collect();
        Forward {
            user,
            item,
            joined,
            logits,
        }
    }

    /// One example's gradient as sparse pieces: (GMF user row, GMF item row, MLP user
    /// row, MLP item row, dW, db) and their per-table squared norms.
    fn gradient_one(
        &self,
        theta: &[f32],
        f: &Forward,
        dlogits: &[f32],
    ) -> ([Vec<f32>; 6], [f32; 5]) {
        let s = self.shape;
        let o = s.offsets();
        let (g, m, j) = (s.gmf_dim, s.mlp_dim, s.joined());
        let w = &theta[o[4]..o[5]];
        let dz: Vec<f32> = (0..j)
            .map(|c| (0..s.classes).map(|k| w[k * j + c] * dlogits[k]).sum())
            .collect();
        let ug = &theta[o[0] + f.user * g..][..g];
        let ig = &theta[o[1] + f.item * g..][..g];
        let d_ug: Vec<f32> = dz[..g].iter().zip(ig).map(|(d, v)| d * v).collect();
        let d_ig: Vec<f32> = dz[..g].iter().zip(ug).map(|(d, v)| d * v).collect();
        let d_um = dz[g..g + m].to_vec();
        let d_im = dz[g + m..].to_vec();
        let d_w: Vec<f32> = dlogits
            .iter()
            .flat_map(|&dk| f.joined.iter().map(move |z| dk * z))
            .collect();
        let d_b = dlogits.to_vec();
        let sq = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>();
        let norms = [
            sq(&d_ug),
            sq(&d_ig),
            sq(&d_um),
            sq(&d_im),
            sq(&d_w) + sq(&d_b),
        ];
        ([d_ug, d_ig, d_um, d_im, d_w, d_b], norms)
    }

    fn add_scaled(&self, out: &mut [f32], f: &Forward, pieces: &[Vec<f32>; 6], scale: [f32; 5]) {
        let s = self.shape;
        let o = s.offsets();
        let (g, m) = (s.gmf_dim, s.mlp_dim);
        let starts = [
            o[0] + f.user * g,
            o[1] + f.item * g,
            o[2] + f.user * m,
            o[3] + f.item * m,
            o[4],
            o[5],
        ];
        for (t, (piece, &start)) in pieces.iter().zip(&starts).enumerate() {
            let c = scale[t.min(4)];
            for (dst, v) in out[start..start + piece.len()].iter_mut().zip(piece) {
                *dst += c * v;
            }
        }
    }

    /// Materialised per-example gradients, dense (tests and audits).
    pub fn per_sample_gradients(&self, x: &Tensor, labels: &[u32]) -> Result<Vec<Vec<f32>>> {
        let theta = self.read()?;
        let ids = self.ids(x)?;
        let mut out = Vec::with_capacity(ids.len());
        for (&(u, i), &y) in ids.iter().zip(labels) {
            let f = self.forward_one(&theta, u, i);
            let (_, d) = cross_entropy(&f.logits, &[y], self.shape.classes);
            let (pieces, _) = self.gradient_one(&theta, &f, &d);
            let mut dense = vec![0.0f32; theta.len()];
            self.add_scaled(&mut dense, &f, &pieces, [1.0; 5]);
            out.push(dense);
        }
        Ok(out)
    }
}

impl PrivateModel for NcfModel {
    type Data = Dataset;

    fn num_params(&self) -> usize {
        self.shape.num_params()
    }

    fn parameters(&self) -> Result<Vec<f32>> {
        Ok(self.read()?.clone())
    }

    fn set_parameters(&mut self, theta: &[f32]) -> Result<()> {
        if theta.len() != self.num_params() {
            return Err(Error::invalid_model(
                "NCF",
                format!(
                    "{} values for {} parameters",
                    theta.len(),
                    self.num_params()
                ),
            ));
        }
        let mut guard = self
            .theta
            .write()
            .map_err(|_| Error::invalid_model("NCF", "NCF parameters poisoned"))?;
        guard.copy_from_slice(theta);
        Ok(())
    }

    fn clipped_gradient(
        &self,
        data: &Dataset,
        batch: &[usize],
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        clipped_gradient_of_batch(self, data, batch, rule)
    }
}

impl Classifier for NcfModel {
    fn logits(&self, x: &Tensor) -> Result<Vec<f32>> {
        let theta = self.read()?;
        Ok(self
            .ids(x)?
            .into_iter()
            .flat_map(|(u, i)| self.forward_one(&theta, u, i).logits)
            .collect())
    }

    fn clipped_cross_entropy_gradient(
        &self,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        if classes != self.shape.classes || labels.iter().any(|&y| y as usize >= classes) {
            return Err(Error::invalid_model(
                "NCF",
                format!("labels must be < {} classes", self.shape.classes),
            ));
        }
        let theta = self.read()?;
        let ids = self.ids(x)?;
        let mut sum = vec![0.0f32; theta.len()];
        let mut squared_norms = Vec::with_capacity(ids.len());
        let mut losses = Vec::with_capacity(ids.len());
        for (&(u, i), &y) in ids.iter().zip(labels) {
            let f = self.forward_one(&theta, u, i);
            let (loss, d) = cross_entropy(&f.logits, &[y], classes);
            let (pieces, norms) = self.gradient_one(&theta, &f, &d);
            let total: f32 = norms.iter().sum();
            losses.push(loss[0]);
            squared_norms.push(total);
            if !total.is_finite() {
                continue; // clip factor 0: counted by the engine through the NaN norm
            }
            let scale = match rule {
                ClipRule::PerLayer { .. } => norms.map(|n| rule.factor(n, 5)),
                _ => [rule.factor(total, 1); 5],
            };
            self.add_scaled(&mut sum, &f, &pieces, scale);
        }
        Ok(ClippedGradient {
            sum: sum.into(),
            squared_norms,
            losses,
        })
    }
}
