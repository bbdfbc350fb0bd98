//! A byte-level BPE tokenizer (GPT-2's scheme, Hugging Face `tokenizers`) trained on the
//! training documents only, so no validation or test text shapes the vocabulary.

use anyhow::{anyhow, Result};
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{TokenizerBuilder, TokenizerImpl};

/// The tokenizer's type: BPE model, no normaliser, byte-level pre-tokenizer, post-processor
/// and decoder.
type Bpe = TokenizerImpl<BPE, NormalizerWrapper, ByteLevel, ByteLevel, ByteLevel>;

/// A trained byte-level BPE: every string encodes (256 byte symbols are in the vocabulary)
/// and decodes back to itself.
pub struct LmTokenizer {
    inner: Bpe,
}

impl LmTokenizer {
    /// Trains a vocabulary of at most `vocab_size` tokens (merges of pairs seen at least
    /// twice) on `texts`.
    pub fn train<'a>(
        texts: impl Iterator<Item = &'a str> + Send,
        vocab_size: usize,
    ) -> Result<Self> {
        let byte_level = ByteLevel::new(false, true, true);
        let mut trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build();
        let mut inner: Bpe = TokenizerBuilder::new()
            .with_model(BPE::default())
            .with_normalizer(None)
            .with_pre_tokenizer(Some(byte_level))
            .with_post_processor(Some(byte_level))
            .with_decoder(Some(byte_level))
            .build()
            .map_err(|e| anyhow!("building the tokenizer: {e}"))?;
        inner
            .train(&mut trainer, texts)
            .map_err(|e| anyhow!("training the tokenizer: {e}"))?;
        Ok(LmTokenizer { inner })
    }

    /// The token ids of `text`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("encoding: {e}"))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| anyhow!("decoding: {e}"))
    }

    /// The vocabulary's size.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXTS: [&str; 3] = [
        "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced no evidence .",
        "The jury further said in term-end presentments that the City Executive Committee deserves the praise .",
        "The jury said it did find that many of Georgia's registration and election laws are outmoded .",
    ];

    #[test]
    fn trained_bpe_round_trips_and_is_deterministic() -> Result<()> {
        let a = LmTokenizer::train(TEXTS.iter().copied(), 300)?;
        let b = LmTokenizer::train(TEXTS.iter().copied(), 300)?;
        assert!(
            a.vocab_size() > 256 && a.vocab_size() <= 300,
            "{}",
            a.vocab_size()
        );
        let unseen = "Unseen text: zebra! 1913 ünïcode";
        for text in TEXTS.iter().chain([&unseen]) {
            let ids = a.encode(text)?;
            assert_eq!(a.decode(&ids)?, *text);
            assert_eq!(ids, b.encode(text)?);
        }
        // Merges compress the training text: fewer tokens than bytes.
        assert!(a.encode(TEXTS[0])?.len() < TEXTS[0].len());
        Ok(())
    }
}
