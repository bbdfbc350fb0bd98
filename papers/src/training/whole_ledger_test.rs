//! Each ε column of a run composes its whole ledger: SA-DPSGD's privatised row charges
//! an acceptance test per iteration besides the step, and its "ε PLD", "μ CLT" and
//! "ε CLT" columns once counted the steps only (PLD 3.125 where the ledger gives 3.61 in
//! the full table). Checked on the smoke profile of the real row against the composition
//! of both events built here from the row's settings.

use dp_accounting::gdp::{epsilon_for_mu, mu_poisson};
use dp_accounting::{Accountant, AccountantKind, DpEvent, NeighbouringRelation};
use dp_optim::annealing::EnergySource;
use dp_optim::gdp::authors_orders;

use super::super::config::TrainingTable;
use super::super::table::load_paper;
use super::{load_data, run_cached, run_key};
use crate::args::Profile;

fn pld(event: &DpEvent, delta: f64) -> f64 {
    let mut pld = AccountantKind::Pld
        .build(NeighbouringRelation::AddOrRemoveOne, &authors_orders())
        .expect("pld");
    pld.compose(event, 1).expect("compose");
    pld.epsilon(delta).expect("epsilon")
}

#[test]
fn every_epsilon_column_of_the_privatised_row_composes_the_whole_ledger() {
    let (tables, _) = load_paper("sa-dpsgd").expect("paper");
    let table: TrainingTable = tables
        .into_iter()
        .find(|t| t.heading.id == "table1-mnist")
        .and_then(|t| t.kind::<TrainingTable>().cloned())
        .expect("table1-mnist");
    let run = table
        .runs
        .iter()
        .find(|r| r.label == "SA-DPSGD (tanh, privatised test)")
        .expect("the privatised row")
        .clone();
    let data = match load_data(table.dataset).expect("load") {
        Ok(data) => data,
        Err(why) => return eprintln!("skipping: {why}"),
    };
    let dir = std::env::temp_dir().join(format!("dp-papers-ledger-{}", std::process::id()));
    let key = run_key(&table, &run, Profile::Smoke, 1).expect("key");
    let (result, _) = run_cached(&dir, &key, &table, &run, Profile::Smoke, 1, &data).expect("run");
    let _ = std::fs::remove_dir_all(&dir);

    let Some(EnergySource::Privatised {
        sampling_rate: q_test,
        noise_multiplier: sigma_test,
        ..
    }) = run.annealing.map(|a| a.energy)
    else {
        panic!("the row's test is privatised");
    };
    let last = result.epochs.last().expect("an epoch");
    let steps = last.steps;
    let q = table.batch_size as f64 / result.train_examples as f64;
    let sigma = result.noise_multiplier.expect("private");
    let step = DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma));
    let test = DpEvent::poisson_sampled(q_test, DpEvent::gaussian(sigma_test));
    let whole = DpEvent::Composed {
        events: vec![
            DpEvent::self_composed(step.clone(), steps),
            DpEvent::self_composed(test, steps),
        ],
    };
    let delta = table.delta;
    let expected_pld = pld(&whole, delta);
    let steps_only = pld(&DpEvent::self_composed(step, steps), delta);
    let mu = (steps as f64
        * (mu_poisson(q, sigma, 1.0).powi(2) + mu_poisson(q_test, sigma_test, 1.0).powi(2)))
    .sqrt();
    let close = |a: f64, b: f64, tol: f64| (a - b).abs() <= tol * b.abs();
    let eps_pld = last.eps_pld.expect("ε PLD");
    assert!(
        close(eps_pld, expected_pld, 1e-3),
        "ε PLD {eps_pld} vs {expected_pld}"
    );
    assert!(
        eps_pld > steps_only * (1.0 + 1e-4),
        "ε PLD {eps_pld} ≤ steps only {steps_only}"
    );
    let mu_clt = last.mu_clt.expect("μ CLT");
    assert!(close(mu_clt, mu, 1e-9), "μ CLT {mu_clt} vs {mu}");
    let eps_clt = last.eps_clt.expect("ε CLT");
    assert!(
        close(eps_clt, epsilon_for_mu(delta, mu), 1e-6),
        "ε CLT {eps_clt}"
    );
}
