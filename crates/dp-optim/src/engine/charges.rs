//! The engine's charges: the ledger behind its budget filter, built for a run's privacy
//! settings, each step's reservation, and extra charges.

use dp_accounting::{
    calibrate_steps, Budget, BudgetFilter, DpEvent, DynAccountant, Guarantee, Reservation,
};
use dp_mechanisms::Mechanism;
use dp_models::PrivateModel;

use super::step::step_mechanism;
use super::{Charges, PrivacyEngine};
use crate::config::PrivacyConfig;
use crate::error::{Error, Result};
use crate::sampler::Sampler;
use dp_accounting::validate;

/// [`dp_accounting::Error::BudgetExceeded`] as the engine's [`Error::BudgetExceeded`].
fn budget_error(e: dp_accounting::Error) -> Error {
    match e {
        dp_accounting::Error::BudgetExceeded {
            epsilon,
            budget_epsilon,
            delta,
        } => Error::BudgetExceeded {
            epsilon,
            budget_epsilon,
            delta,
        },
        other => other.into(),
    }
}

impl<M: PrivateModel> PrivacyEngine<M> {
    /// The ledger (behind its budget filter) of a private run, and the planned step
    /// count under a budget. An asymptotic accountant (GDP's CLT) may report but never
    /// enforce a budget: its ε may be below the true value.
    pub(super) fn private_ledger(
        p: &PrivacyConfig,
        sampler: Sampler,
        n: usize,
    ) -> Result<(Option<Charges>, Option<u64>)> {
        validate::positive("noise_multiplier", p.noise_multiplier)?;
        validate::positive("max_grad_norm", p.max_grad_norm)?;
        let scheme = sampler.scheme(n);
        let relation = scheme.relation();
        let accountant = p.accountant.build(relation, &p.orders)?;
        // The accountant must accept the sampler's event: a mismatch is an error. The
        // event is that of the mechanism every step releases through.
        let event = step_mechanism(p, &scheme)?.event();
        let step = scheme.amplify(event)?;
        accountant.supports(&step)?;
        let Some(target) = p.target_epsilon else {
            let open = BudgetFilter::new(accountant, Budget::unbounded(p.delta)?);
            return Ok((Some(open), None));
        };
        // Whether ε is a bound can depend on the event (GDP is exact for a Gaussian, a
        // CLT approximation once sampled): ask after one step.
        let mut probe = accountant.boxed_clone();
        probe.compose(&step, 1)?;
        if probe.guarantee() == Guarantee::Asymptotic {
            return Err(Error::InvalidSetting {
                name: "accountant",
                value: p.accountant.name().into(),
                reason: "gives an asymptotic epsilon that may be below the true value: it \
                         can report but not enforce a budget (enforce with rdp or pld)"
                    .into(),
            });
        }
        let make = || p.accountant.build(relation, &p.orders);
        let run = |t| DpEvent::self_composed(step.clone(), scheme.charges(t));
        let planned = calibrate_steps(make, run, target, p.delta)?.value;
        let budget = Budget::new(target, p.delta)?;
        Ok((Some(BudgetFilter::new(accountant, budget)), Some(planned)))
    }

    /// The dry run of a charge of `event` (`None`: non-private, or a step that costs
    /// nothing, as inside a shuffled epoch).
    pub(super) fn reserve(
        &self,
        event: Option<&DpEvent>,
    ) -> Result<Option<Reservation<Box<dyn DynAccountant>>>> {
        match (&self.ledger, event) {
            (Some(filter), Some(event)) => filter.reserve(event, 1).map(Some).map_err(budget_error),
            _ => Ok(None),
        }
    }

    /// Charges an extra event (e.g. a privatised acceptance test) to the ledger, under
    /// the budget ([`Error::BudgetExceeded`] and no change if it does not fit); an error
    /// for non-private runs, since nothing would record it. Call it *before* releasing
    /// what the event covers.
    pub fn charge(&mut self, event: &DpEvent) -> Result<()> {
        match &mut self.ledger {
            Some(filter) => {
                let reservation = filter.reserve(event, 1).map_err(budget_error)?;
                Ok(filter.commit(reservation)?)
            }
            None => Err(Error::NotPrivate {
                operation: "charge",
            }),
        }
    }
}
