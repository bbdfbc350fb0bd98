//! Which executor computes a [`ModuleClassifier`](super::ModuleClassifier)'s private
//! gradients: the fastest that covers the network, chosen when it is built.

use candle_core::{Device, Tensor};

use super::fused_route::FusedRoute;
use super::sequential::Sequential;
use super::staged_route::StagedRoute;
use super::taps::Taps;
use crate::error::{Error, Result};
use crate::ClipRule;
use crate::ClippedGradient;

/// An executor of the private backward. All three give the same clipped sums within
/// float rounding on every network they share (tests/nn/executors.rs); they differ in
/// speed and reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Executor {
    /// One pass per sample computing gradient, norm, clip and clipped sum (one CPU op
    /// each way): a [`Sequential`] of Conv2d and Linear with bias, tanh, ReLU, max and
    /// average pooling and flatten, f32, on the CPU.
    Fused,
    /// The layers one by one with their own CPU backward, no Candle graph: a
    /// [`Sequential`] of Conv2d, Linear, tanh, ReLU, max pooling and flatten on the CPU.
    Staged,
    /// Candle's backward through the taps ([`Taps::clipped_gradients`]): any module of DP
    /// layers, on any device.
    General,
}

/// A planned executor.
pub(crate) enum Route {
    Fused(FusedRoute),
    Staged(StagedRoute),
    General,
}

impl Route {
    /// The fastest route covering `module`, or `only` that one (an error if it does not
    /// cover the module).
    pub(crate) fn plan(
        module: &dyn std::any::Any,
        taps: &Taps,
        device: &Device,
        only: Option<Executor>,
    ) -> Result<Route> {
        let net = module.downcast_ref::<Sequential>();
        let fused = || net.and_then(|net| FusedRoute::plan(net, taps, device));
        let staged = || net.and_then(|net| StagedRoute::plan(net, taps, device));
        let route = match only {
            None => fused()
                .map(Route::Fused)
                .or_else(|| staged().map(Route::Staged)),
            Some(Executor::Fused) => fused().map(Route::Fused),
            Some(Executor::Staged) => staged().map(Route::Staged),
            Some(Executor::General) => None,
        };
        match (route, only) {
            (Some(route), _) => Ok(route),
            (None, None | Some(Executor::General)) => Ok(Route::General),
            (None, Some(executor)) => Err(Error::invalid_model(
                "executor",
                format!("the {executor:?} executor does not cover this network on {device:?}"),
            )),
        }
    }

    /// The executor.
    pub(crate) fn executor(&self) -> Executor {
        match self {
            Route::Fused(_) => Executor::Fused,
            Route::Staged(_) => Executor::Staged,
            Route::General => Executor::General,
        }
    }

    /// The fused executor's count of floating-point operations per sample, on that route.
    pub(crate) fn flops_per_sample(&self) -> Option<crate::fused::Flops> {
        match self {
            Route::Fused(route) => Some(route.flops_per_sample()),
            Route::Staged(_) | Route::General => None,
        }
    }

    /// Logits of flat inputs `x`, where this route computes them.
    pub(crate) fn logits(&self, taps: &Taps, x: &Tensor) -> Option<Result<Vec<f32>>> {
        match self {
            Route::Fused(route) => Some(route.logits(taps, x)),
            Route::Staged(route) => Some(route.logits(x)),
            Route::General => None,
        }
    }

    /// The clipped cross-entropy gradient, where this route computes it.
    pub(crate) fn clipped_cross_entropy_gradient(
        &self,
        taps: &Taps,
        x: &Tensor,
        labels: &[u32],
        classes: usize,
        rule: ClipRule,
    ) -> Option<Result<ClippedGradient>> {
        Some(match self {
            Route::Fused(route) => {
                route.clipped_cross_entropy_gradient(taps, x, labels, classes, rule)
            }
            Route::Staged(route) => {
                route.clipped_cross_entropy_gradient(taps, x, labels, classes, rule)
            }
            Route::General => return None,
        })
    }
}
