//! What a training engine needs from a model, whichever tier computes it.

use candle_core::{Device, Tensor, Var};

use crate::clipped_gradient::ClippedGradient;
use crate::data::Dataset;
use crate::error::Result;
use crate::fused::{FusedModel, Keep};
use crate::loss::{check_labels, cross_entropy};
use crate::staged::StagedModel;
use crate::training_data::TrainingData;
use crate::ClipRule;

/// A model a DP engine can train: flat parameters, and the clipped gradient sum of a
/// batch of its training data. Any model with per-example gradients qualifies: the
/// classifiers of this crate ([`Classifier`]), a sparse embedding on word pairs, …
pub trait PrivateModel {
    /// The training data it reads, by example index.
    type Data: TrainingData + ?Sized;

    /// The number of parameters.
    fn num_params(&self) -> usize;
    /// The parameters, flat.
    fn parameters(&self) -> Result<Vec<f32>>;
    /// Replaces the parameters.
    fn set_parameters(&mut self, theta: &[f32]) -> Result<()>;
    /// The loss of each example `batch` of `data`, its per-example gradients clipped by
    /// `rule` and summed. The sum must cover every parameter: flat on the host, or (a
    /// model that keeps its parameters on a device) one tensor per
    /// [`device_parameters`](Self::device_parameters) variable, in order; the engine
    /// takes either and moves it where it keeps its sums.
    fn clipped_gradient(
        &self,
        data: &Self::Data,
        batch: &[usize],
        rule: ClipRule,
    ) -> Result<ClippedGradient>;

    /// A description of the architecture, for checkpoint fingerprints: a checkpoint is
    /// only resumed into a model with the same description. The default names the
    /// parameter count only; models with a spec describe it.
    fn architecture(&self) -> String {
        format!("{} parameters", self.num_params())
    }

    /// The parameters as variables on the model's device, when it keeps them there (a
    /// network of DP layers on a GPU): the engine then keeps the clipped sum, θ and the
    /// optimizer's moments on that device, and only the noise crosses from the host.
    /// `None` (the default): the engine works on flat host vectors. The variables' flat
    /// concatenation must be [`parameters`](Self::parameters)' order.
    fn device_parameters(&self) -> Option<Vec<Var>> {
        None
    }
}

/// A model whose clipped gradient can be restricted to a set of coordinates, for
/// sparse DP-SGD: noise is added on the selected coordinates only, so the sum released
/// there must be zero elsewhere and bounded on them.
pub trait SparsePrivateModel: PrivateModel {
    /// Each example's gradient clipped by `first`, restricted to the coordinates where
    /// `support` (one flag per parameter) is set, clipped again by `rule`, summed: zero
    /// off the support, and each example's contribution bounded by `rule`.
    fn clipped_gradient_on_support(
        &self,
        data: &Self::Data,
        batch: &[usize],
        first: ClipRule,
        support: &[bool],
        rule: ClipRule,
    ) -> Result<ClippedGradient>;
}

/// A classifier on a labelled [`Dataset`]: logits, and the clipped cross-entropy
/// gradient of a batch given as tensors.
pub trait Classifier: PrivateModel<Data = Dataset> {
    /// Logits (B × classes), flat.
    fn logits(&self, x: &Tensor) -> Result<Vec<f32>>;
    /// Cross-entropy per example, its per-example gradients clipped by `rule`, summed.
    fn clipped_cross_entropy_gradient(
        &self,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<ClippedGradient>;
}

/// [`PrivateModel::clipped_gradient`] of a classifier: the examples `batch` of `data`
/// gathered into one input tensor and their labels.
pub fn clipped_gradient_of_batch<C: Classifier + ?Sized>(
    model: &C,
    data: &Dataset,
    batch: &[usize],
    rule: ClipRule,
) -> Result<ClippedGradient> {
    let (x, labels) = data.gather(batch)?;
    model.clipped_cross_entropy_gradient(&x, &labels, data.classes, rule)
}

impl PrivateModel for FusedModel {
    type Data = Dataset;

    fn num_params(&self) -> usize {
        self.spec().num_params()
    }

    fn architecture(&self) -> String {
        format!("{:?}", self.spec())
    }

    fn parameters(&self) -> Result<Vec<f32>> {
        self.theta_values()
    }

    fn set_parameters(&mut self, theta: &[f32]) -> Result<()> {
        self.theta()
            .set(&Tensor::from_slice(theta, theta.len(), &Device::Cpu)?)?;
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

impl Classifier for FusedModel {
    fn logits(&self, x: &Tensor) -> Result<Vec<f32>> {
        let logits = self.forward_keeping(x, Keep::Logits)?;
        Ok(logits.flatten_all()?.to_vec1()?)
    }

    fn clipped_cross_entropy_gradient(
        &self,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        let logits: Vec<f32> = self.forward(x)?.flatten_all()?.to_vec1()?;
        check_labels(logits.len(), labels, classes)?;
        let (losses, dlogits) = cross_entropy(&logits, labels, classes);
        let dlogits = Tensor::from_vec(dlogits, (labels.len(), classes), &Device::Cpu)?;
        let (sum, norms) = self.backward(&dlogits, rule)?;
        Ok(ClippedGradient {
            sum: sum.to_vec1::<f32>()?.into(),
            squared_norms: norms.to_vec1()?,
            losses,
        })
    }
}

impl PrivateModel for StagedModel {
    type Data = Dataset;

    fn num_params(&self) -> usize {
        self.vars().iter().map(|v| v.as_tensor().elem_count()).sum()
    }

    fn parameters(&self) -> Result<Vec<f32>> {
        crate::flat::flatten(self.vars().iter().map(|v| v.as_tensor()))
    }

    fn set_parameters(&mut self, theta: &[f32]) -> Result<()> {
        crate::flat::set_vars(&self.vars(), theta)
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

impl Classifier for StagedModel {
    fn logits(&self, x: &Tensor) -> Result<Vec<f32>> {
        Ok(self.forward(x)?.flatten_all()?.to_vec1()?)
    }

    fn clipped_cross_entropy_gradient(
        &self,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Result<ClippedGradient> {
        let _ = classes; // the logits' width: checked by the cross-entropy
        let out = self.private_gradients(x, labels, rule)?;
        let mut sum = Vec::with_capacity(self.num_params());
        for t in &out.clipped_sums {
            sum.extend(t.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(ClippedGradient {
            sum: sum.into(),
            squared_norms: out.squared_norms,
            losses: out.losses,
        })
    }
}
