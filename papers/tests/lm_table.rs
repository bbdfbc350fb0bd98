//! The language-model table's runs end to end on a synthetic corpus (no data needed): a
//! non-private run memorises canaries inserted many times, a private run's ledger meets
//! its ε and its one-run audit stays below it.

use dp_mechanisms::NoiseSource;
use dp_models::data::BrownText;
use dp_papers::lm::audit::AuditConfig;
use dp_papers::lm::canaries::{exposure_bound, mean_exposure};
use dp_papers::lm::corpus::LmCorpus;
use dp_papers::lm::model::LmShape;
use dp_papers::lm::train::train_one;
use dp_papers::lm::{LmProfile, LmRun, LmSizes, LmTable};

/// 30 documents of one genre, sentences of words drawn from a small word list.
fn documents() -> Vec<BrownText> {
    let words = [
        "the", "a", "dog", "cat", "runs", "sees", "house", "old", "red", "man", "woman", "walks",
        "to", "from", "city", "river", "quickly", "and", "but", "green",
    ];
    let mut rng = NoiseSource::seeded(5);
    (1..=30)
        .map(|d| {
            let sentences: Vec<String> = (0..30)
                .map(|_| {
                    let n = 4 + rng.index_below(6);
                    let s: Vec<&str> = (0..n)
                        .map(|_| words[rng.index_below(words.len())])
                        .collect();
                    format!("{} .", s.join(" "))
                })
                .collect();
            BrownText {
                name: format!("ca{d:02}"),
                category: 'a',
                text: sentences.join("\n"),
            }
        })
        .collect()
}

fn table() -> LmTable {
    let profile = LmProfile {
        sizes: LmSizes {
            vocab: 300,
            context: 24,
            max_train_windows: 100_000,
            max_eval_windows: 100_000,
            train_eval: 50,
            secret_len: 4,
            canaries_per_count: 3,
            candidates: 300,
        },
        shape: LmShape {
            context: 24,
            width: 16,
            heads: 2,
            layers: 1,
        },
        epochs: 4,
        batch_size: 32,
        audit: AuditConfig {
            canaries: 40,
            guesses: 10,
            confidence: 0.95,
        },
    };
    LmTable {
        full: profile,
        smoke: profile,
        physical_batch: 64,
        clip: 1.0,
        lr: 0.01,
        canary_copies: vec![0, 30],
        runs: vec![],
    }
}

#[test]
fn non_private_memorises_and_private_runs_meet_their_epsilon() -> anyhow::Result<()> {
    let table = table();
    let corpus = LmCorpus::build(
        documents(),
        &table.full.sizes,
        &table.canary_copies,
        &table.full.audit,
    )?;
    let run = |label: &str, epsilon| LmRun {
        label: label.into(),
        epsilon,
    };
    let plain = train_one(&table, &table.full, &run("non-private", None), &corpus, "k")?;
    let (seen, control) = (
        mean_exposure(&plain.exposures, 30),
        mean_exposure(&plain.exposures, 0),
    );
    eprintln!("non-private exposure: n_c = 30 {seen:.2}, never inserted {control:.2}");
    assert!(seen > control + 3.0, "{seen} vs {control}");
    assert!(plain.epsilon_pld.is_none() && plain.noise_multiplier == 0.0);
    let private = train_one(&table, &table.full, &run("ε = 1", Some(1.0)), &corpus, "k")?;
    let epsilon = private.epsilon_pld.expect("a private run has a ledger");
    assert!(epsilon <= 1.0 && epsilon > 0.9, "{epsilon}");
    assert!(
        private.epsilon_rdp.expect("RDP") >= epsilon,
        "RDP is looser than PLD"
    );
    assert!(private.audit.lower_bound <= epsilon);
    let one_copy_bound = exposure_bound(epsilon, private.delta, 1, 300);
    eprintln!(
        "private exposure: n_c = 30 {:.2}; a single insertion's bound {one_copy_bound:.2}",
        mean_exposure(&private.exposures, 30)
    );
    assert!(
        private.epochs.len() == 4 && private.epochs.iter().all(|e| e.test_perplexity.is_finite())
    );
    Ok(())
}
