//! Everything one language-model table trains and evaluates on: the Brown corpus split by
//! document, the BPE trained on the training documents (or, with a public part, on the
//! public genres' training documents), the sequences, the canaries inserted into the
//! training rows (the same for every run of the table), and the public part's rows.

use anyhow::{ensure, Result};
use dp_mechanisms::NoiseSource;
use dp_models::data::BrownText;

use super::audit::{AuditCanaries, AuditConfig};
use super::canaries::{draw_canaries, Canary, SecretFormat};
use super::rows::TokenRows;
use super::sequences::Sequences;
use super::split::split_documents;
use super::tokenizer::LmTokenizer;
use super::LmSizes;

/// The Secret Sharer canaries' prefix.
pub const CANARY_PREFIX: &str = "My secret code is";
/// The audit canaries' prefix.
pub const AUDIT_PREFIX: &str = "The audit number is";

/// A table's data.
pub struct LmCorpus {
    /// The tokenizer's vocabulary size.
    pub vocab: usize,
    /// Corpus windows in the training rows (before canaries).
    pub windows: usize,
    /// The most windows one training document gives (the group size of a document).
    pub max_per_document: usize,
    /// Training rows: windows, then each canary `copies` times, then the included audit
    /// canaries.
    pub train: TokenRows,
    /// `train_eval` training windows, evenly spaced (the train perplexity, computed on
    /// private data).
    pub train_eval: TokenRows,
    /// Validation windows.
    pub validation: TokenRows,
    /// Test windows.
    pub test: TokenRows,
    /// The Secret Sharer format and canaries.
    pub canary_format: SecretFormat,
    /// The canaries.
    pub canaries: Vec<Canary>,
    /// The audit format and canaries.
    pub audit_format: SecretFormat,
    /// The audit canaries.
    pub audit: AuditCanaries,
    /// The public genres' windows (tables with a public part).
    pub public: Option<PublicRows>,
}

/// The public part's rows: pretraining's training and validation windows.
pub struct PublicRows {
    /// Training windows of the public documents.
    pub train: TokenRows,
    /// Validation windows of the public documents.
    pub validation: TokenRows,
}

impl LmCorpus {
    /// Splits, tokenizes and cuts `documents`, then draws and inserts the canaries (seeded:
    /// the same for every run).
    ///
    /// With `public_genres`, the documents of those genres are the public part (the
    /// tokenizer's training text and the public rows), the rest the private part the
    /// training, validation and test rows come from; without, the tokenizer is trained on
    /// the training documents.
    pub fn build(
        documents: Vec<BrownText>,
        sizes: &LmSizes,
        canary_copies: &[usize],
        audit: &AuditConfig,
        public_genres: Option<&str>,
    ) -> Result<Self> {
        if let Some(genres) = public_genres {
            for g in genres.chars() {
                ensure!(
                    documents.iter().any(|d| d.category == g),
                    "public genre {g:?} matches no document (Brown's categories are a–r)"
                );
            }
        }
        let (public, private): (Vec<BrownText>, Vec<BrownText>) = documents
            .into_iter()
            .partition(|d| public_genres.is_some_and(|g| g.contains(d.category)));
        let public = public_genres.map(|_| split_documents(public));
        let split = split_documents(private);
        let tokenizer_text = public.as_ref().map_or(&split.train, |p| &p.train);
        let tokenizer =
            LmTokenizer::train(tokenizer_text.iter().map(|d| d.text.as_str()), sizes.vocab)?;
        let vocab = tokenizer.vocab_size();
        let cut = |docs: &[BrownText], limit: usize| -> Result<Sequences> {
            let tokens: Vec<Vec<u32>> = docs
                .iter()
                .map(|d| tokenizer.encode(&d.text))
                .collect::<Result<_>>()?;
            let mut s = Sequences::cut(&tokens, sizes.context);
            let keep = s.len().min(limit);
            s.tokens.truncate(keep * s.window);
            s.document.truncate(keep);
            Ok(s)
        };
        let train = cut(&split.train, sizes.max_train_windows)?;
        let public_windows = match &public {
            Some(p) => Some((
                cut(&p.train, sizes.max_train_windows)?,
                cut(&p.validation, sizes.max_eval_windows)?,
            )),
            None => None,
        };
        let (validation, test) = (
            cut(&split.validation, sizes.max_eval_windows)?,
            cut(&split.test, sizes.max_eval_windows)?,
        );
        ensure!(
            !train.is_empty() && !test.is_empty(),
            "no training or test window"
        );
        let width = sizes.context + 1;
        let rows = |s: &Sequences| -> Result<TokenRows> {
            let refs: Vec<&[u32]> = s.tokens.chunks_exact(s.window).collect();
            TokenRows::whole(&refs, width, vocab)
        };
        let format = |prefix: &str| -> Result<SecretFormat> {
            Ok(SecretFormat {
                prefix: tokenizer.encode(prefix)?,
                secret_len: sizes.secret_len,
                vocab,
            })
        };
        let (canary_format, audit_format) = (format(CANARY_PREFIX)?, format(AUDIT_PREFIX)?);
        for f in [&canary_format, &audit_format] {
            ensure!(
                f.len() <= width,
                "a canary is {} tokens (prefix {} and secret {}), longer than the {width} of a training row",
                f.len(),
                f.prefix.len(),
                f.secret_len
            );
        }
        let mut rng = NoiseSource::seeded(21);
        let canaries = draw_canaries(
            &canary_format,
            canary_copies,
            sizes.canaries_per_count,
            &mut rng,
        );
        let audit_canaries = AuditCanaries::draw(&audit_format, audit, &mut rng);
        let mut all: Vec<&[u32]> = train.tokens.chunks_exact(train.window).collect();
        for c in &canaries {
            all.extend(std::iter::repeat_n(c.tokens.as_slice(), c.copies));
        }
        all.extend(audit_canaries.inserted().map(Vec::as_slice));
        // Evenly spaced over the training windows (documents are in genre order, so the
        // first windows would all be press reportage).
        let stride = (train.len() / sizes.train_eval.max(1)).max(1);
        let eval: Vec<&[u32]> = train
            .tokens
            .chunks_exact(train.window)
            .step_by(stride)
            .take(sizes.train_eval)
            .collect();
        let public = match public_windows {
            Some((train, validation)) => {
                ensure!(!train.is_empty(), "no public training window");
                Some(PublicRows {
                    train: rows(&train)?,
                    validation: rows(&validation)?,
                })
            }
            None => None,
        };
        Ok(LmCorpus {
            public,
            vocab,
            windows: train.len(),
            max_per_document: train.max_per_document(),
            train: TokenRows::whole(&all, width, vocab)?,
            train_eval: TokenRows::whole(&eval, width, vocab)?,
            validation: rows(&validation)?,
            test: rows(&test)?,
            canary_format,
            canaries,
            audit_format,
            audit: audit_canaries,
        })
    }
}
