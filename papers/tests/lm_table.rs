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
use dp_papers::lm::sweep::{chosen, findings, proxy_runs, run_sweep, LmSweep, SweepOutcome};
use dp_papers::lm::train::calibrated_sigma;
use dp_papers::lm::train::train_one;
use dp_papers::lm::{LmProfile, LmRun, LmSizes, LmTable, LoraSpec, PublicPart, Start};
use dp_papers::{Profile, ReproduceArgs};

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
        sweep: None,
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
        batch_size: None,
        noise_multiplier: None,
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
        batch_size: None,
        noise_multiplier: None,
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

/// The sweep reads only public documents: two corpora that differ only in their private
/// genre give bit-identical candidates. Each family's choice is its lowest proxy
/// validation perplexity, and a table run that uses another learning rate is flagged.
#[test]
fn the_sweep_reads_no_private_document_and_flags_an_unswept_rate() -> anyhow::Result<()> {
    let mut table = table();
    table.full.epochs = 1;
    table.full.pretrain_epochs = 2;
    table.public = Some(PublicPart {
        genres: "ab".into(),
        lr: 0.01,
    });
    let candidate = |lr: f64| LmRun {
        label: format!("sweep: DP, η = {lr}"),
        epsilon: Some(4.0),
        start: Start::Pretrained,
        lora: None,
        lr: Some(lr),
        batch_size: None,
        noise_multiplier: None,
    };
    let sweep = LmSweep {
        pretrain_genres: "a".into(),
        runs: vec![candidate(1e-4), candidate(0.02)],
    };
    let dir = std::env::temp_dir().join(format!("dp-lm-sweep-{}", std::process::id()));
    let args = ReproduceArgs {
        paper: "lm".into(),
        profile: Profile::Full,
        seeds: 1,
        out: dir.clone(),
        only: None,
        list: false,
        cached_only: false,
        runs: vec![],
        jobs: None,
        page: None,
    };
    let outcome = |private_seed: u64, sub: &str| -> anyhow::Result<_> {
        let mut documents = documents_of('a', 5);
        documents.extend(documents_of('b', 6));
        documents.extend(documents_of('c', private_seed));
        run_sweep(&table, &sweep, &documents, &args, &dir.join(sub), 960)
    };
    // The table's sampling rate, steps and noise per example: 960 rows against the
    // proxy's 240 give B′ = 8 of B = 32 and σ′ = σ/4.
    let runs = proxy_runs(&sweep, &table.full, 960, 240)?;
    let sigma = calibrated_sigma(4.0, 1.0 / 960f64.powf(1.1), 32, 960, 30)?;
    assert_eq!(runs[0].batch_size, Some(8));
    assert_eq!(runs[0].noise_multiplier, Some(sigma * 8.0 / 32.0));
    // A proxy whose integer batch cannot come within a step per epoch is refused.
    assert!(proxy_runs(&sweep, &table.full, 960, 15).is_err());
    let (one, other) = (outcome(7, "one")?, outcome(8, "other")?);
    std::fs::remove_dir_all(&dir)?;
    for r in one.results.iter().flatten() {
        assert!(
            r.steps.abs_diff(30) <= 1,
            "{} steps against the table's 30",
            r.steps
        );
    }
    let last = |o: &SweepOutcome| -> Vec<(f64, f64)> {
        o.results
            .iter()
            .flatten()
            .map(|r| {
                let e = r.epochs.last().expect("an epoch");
                (e.validation_perplexity, e.test_perplexity)
            })
            .collect()
    };
    assert_eq!(last(&one).len(), 2);
    assert_eq!(
        last(&one),
        last(&other),
        "the private genre changed the sweep"
    );
    let mut run = candidate(1e-4);
    run.label = "DP fine-tuning".into();
    let (best_candidate, best) = chosen(&sweep, &one, &run).expect("a choice");
    let lowest = last(&one).iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    assert_eq!(
        best.epochs.last().expect("epoch").validation_perplexity,
        lowest
    );
    let best_lr = best_candidate.lr.expect("a rate");
    let other_lr = if best_lr == 1e-4 { 0.02 } else { 1e-4 };
    // Partial results choose nothing.
    let partial = SweepOutcome {
        runs: one.runs.clone(),
        results: vec![one.results[0].clone(), None],
        pretrain_wall_s: None,
    };
    assert!(chosen(&sweep, &partial, &run).is_none());
    for (lr, verdict) in [(best_lr, "holds"), (other_lr, "does not hold")] {
        run.lr = Some(lr);
        table.runs = vec![run.clone()];
        let lines = findings(&table, &sweep, &one);
        let line = lines
            .iter()
            .find(|l| l.starts_with("DP fine-tuning"))
            .expect("a finding");
        assert!(line.ends_with(&format!("— {verdict}.")), "{line}");
        assert!(
            line.contains("edge of its grid"),
            "two candidates: both edges"
        );
    }
    // A table run cannot fix its own σ, and a family cannot mix ε.
    table.runs[0].noise_multiplier = Some(0.1);
    assert!(run_sweep(&table, &sweep, &[], &args, &dir, 960).is_err());
    table.runs[0].noise_multiplier = None;
    let mut mixed = sweep.clone();
    mixed.runs[1].epsilon = Some(8.0);
    assert!(run_sweep(&table, &mixed, &[], &args, &dir, 960).is_err());
    Ok(())
}
