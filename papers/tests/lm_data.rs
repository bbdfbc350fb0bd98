//! The language-model table's data on the real Brown corpus (CI sets DP_DATA_DIR): the
//! document split, the BPE trained on the training documents, and the sequences.

use dp_models::data::load_brown_texts;
use dp_papers::lm::sequences::Sequences;
use dp_papers::lm::split::split_documents;
use dp_papers::lm::tokenizer::LmTokenizer;

#[test]
fn brown_splits_by_document_and_tokenizes() -> anyhow::Result<()> {
    let Some(locator) = crate::real_data::locator("the real-data check") else {
        return Ok(());
    };
    let split = split_documents(load_brown_texts(&locator)?);
    let counts = (split.train.len(), split.validation.len(), split.test.len());
    assert_eq!(counts.0 + counts.1 + counts.2, 500);
    eprintln!("documents train/validation/test: {counts:?}");
    assert_eq!(
        counts,
        (414, 45, 41),
        "every 9th and 10th document of each genre"
    );
    let tokenizer = LmTokenizer::train(split.train.iter().map(|d| d.text.as_str()), 4096)?;
    assert_eq!(tokenizer.vocab_size(), 4096);
    let encode = |docs: &[dp_models::data::BrownText]| -> anyhow::Result<Vec<Vec<u32>>> {
        docs.iter().map(|d| tokenizer.encode(&d.text)).collect()
    };
    let (train, test) = (encode(&split.train)?, encode(&split.test)?);
    assert_eq!(tokenizer.decode(&test[0])?, split.test[0].text);
    let (train, test) = (Sequences::cut(&train, 128), Sequences::cut(&test, 128));
    eprintln!(
        "sequences of 129 tokens: train {} (at most {} per document), test {}",
        train.len(),
        train.max_per_document(),
        test.len()
    );
    assert!(train.len() > 5_000 && !test.is_empty());
    Ok(())
}
