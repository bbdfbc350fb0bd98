//! The NCF recommender registered as a training-table model (`"model": "ncf"`).

use anyhow::{Context, Result};

use super::ncf::{NcfModel, NcfShape};
use crate::paper_model::PaperModel;
use crate::training::{ModelRun, RunResult};

/// The paper's one model.
pub const MODELS: &[PaperModel] = &[PaperModel { name: "ncf", train }];

/// GMF of width 5 and an MLP part of width 10 over MovieLens's users and items, into the
/// 5 rating classes; no layer ranges (its per-sample gradients are closed-form).
fn train(mut cx: ModelRun<'_>) -> Result<RunResult> {
    let shape = cx
        .data
        .movielens
        .context("the NCF model needs MovieLens's user and item counts")?;
    let shape = NcfShape {
        users: shape.users,
        items: shape.items,
        gmf_dim: 5,
        mlp_dim: 10,
        classes: 5,
    };
    let model = NcfModel::new(shape, &mut cx.noise)?;
    cx.execute(model, None, Vec::new())
}
