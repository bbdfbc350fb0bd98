//! The language-model table's runs end to end on a synthetic corpus (no data needed): a
//! non-private run memorises canaries inserted many times, a private run's ledger meets
//! its ε and its one-run audit stays below it.

use dp_mechanisms::NoiseSource;
use dp_models::data::BrownText;
use dp_models::TrainingData;
use dp_papers::lm::audit::AuditConfig;
use dp_papers::lm::canaries::{exposure_bound, mean_exposure};
use dp_papers::lm::corpus::LmCorpus;
use dp_papers::lm::model::LmShape;
use dp_papers::lm::pretrain::pretrained;
use dp_papers::lm::train::train_one;
use dp_papers::lm::{LmProfile, LmRun, LmSizes, LmTable, LoraSpec, PublicPart, Start};

/// 30 documents of one genre, sentences of words drawn from a small word list.
fn documents() -> Vec<BrownText> {
    documents_of('a', 5)
}

/// 30 documents of `genre`, sentences of words drawn from a small word list.
fn documents_of(genre: char, seed: u64) -> Vec<BrownText> {
    let words = [
        "the", "a", "dog", "cat", "runs", "sees", "house", "old", "red", "man", "woman", "walks",
        "to", "from", "city", "river", "quickly", "and", "but", "green",
    ];
    let mut rng = NoiseSource::seeded(seed);
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
                name: format!("c{genre}{d:02}"),
                category: genre,
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
        pretrain_epochs: 6,
    };
    LmTable {
        full: profile,
        smoke: profile,
        physical_batch: 64,
        clip: 1.0,
        lr: 0.01,
        canary_copies: vec![0, 30],
        runs: vec![],
        public: None,
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
        None,
    )?;
    let run = |label: &str, epsilon| LmRun {
        label: label.into(),
        epsilon,
        start: Start::Scratch,
        lora: None,
        lr: None,
    };
    let plain = train_one(
        &table,
        &table.full,
        &run("non-private", None),
        &corpus,
        "k",
        None,
    )?;
    let (seen, control) = (
        mean_exposure(&plain.exposures, 30),
        mean_exposure(&plain.exposures, 0),
    );
    eprintln!("non-private exposure: n_c = 30 {seen:.2}, never inserted {control:.2}");
    assert!(seen > control + 3.0, "{seen} vs {control}");
    assert!(plain.epsilon_pld.is_none() && plain.noise_multiplier == 0.0);
    let private = train_one(
        &table,
        &table.full,
        &run("ε = 1", Some(1.0)),
        &corpus,
        "k",
        None,
    )?;
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

/// A public genre and a private one: the tokenizer and the pretraining see only the
/// public documents; a run from the pretrained weights starts where pretraining ended
/// (lower private test perplexity than the seeded initialisation before any step), and
/// DP LoRA trains only its adapters, meets its ε and leaves the base untouched.
#[test]
fn fine_tuning_starts_from_public_pretraining_and_lora_trains_only_adapters() -> anyhow::Result<()>
{
    let mut table = table();
    table.public = Some(PublicPart {
        genres: "a".into(),
        lr: 0.01,
    });
    let mut documents = documents_of('a', 5);
    documents.extend(documents_of('b', 6));
    let corpus = LmCorpus::build(
        documents,
        &table.full.sizes,
        &table.canary_copies,
        &table.full.audit,
        Some("a"),
    )?;
    let public = corpus.public.as_ref().expect("public rows");
    assert!(!public.train.is_empty() && !public.validation.is_empty());
    let dir = std::env::temp_dir().join(format!("dp-lm-pretrain-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let first = pretrained(&table, &table.full, &corpus, &dir, true)?.expect("pretrained");
    let weights = first.weights.expect("trained weights");
    let again = pretrained(&table, &table.full, &corpus, &dir, false)?.expect("cached");
    assert_eq!(
        again.record.steps, first.record.steps,
        "read back from the cache"
    );
    assert!(
        again.weights.is_none(),
        "weights only where a run trains from them"
    );
    std::fs::remove_dir_all(&dir)?;
    let run = |label: &str, start, lora, epsilon| LmRun {
        label: label.into(),
        epsilon,
        start,
        lora,
        lr: None,
    };
    let mut short = table.clone();
    short.full.epochs = 1;
    let scratch = train_one(
        &short,
        &short.full,
        &run("scratch", Start::Scratch, None, None),
        &corpus,
        "k",
        None,
    )?;
    let tuned = train_one(
        &short,
        &short.full,
        &run("tuned", Start::Pretrained, None, None),
        &corpus,
        "k",
        Some(&weights),
    )?;
    let (a, b) = (
        scratch.epochs[0].test_perplexity,
        tuned.epochs[0].test_perplexity,
    );
    assert!(b < a, "pretrained {b} vs scratch {a}");
    let spec = LoraSpec {
        rank: 2,
        alpha: 4.0,
    };
    let lora = train_one(
        &table,
        &table.full,
        &run("LoRA ε = 2", Start::Pretrained, Some(spec), Some(2.0)),
        &corpus,
        "k",
        Some(&weights),
    )?;
    assert_eq!(
        lora.parameters,
        2 * (2 * 16 + 16 * 2),
        "A and B of q and v in one block"
    );
    assert_eq!(
        lora.parameters + lora.frozen_parameters,
        tuned.parameters + lora.parameters
    );
    let epsilon = lora.epsilon_pld.expect("ledger");
    assert!(epsilon <= 2.0 && epsilon > 1.8, "{epsilon}");
    assert!(lora.epochs.iter().all(|e| e.test_perplexity.is_finite()));
    Ok(())
}
