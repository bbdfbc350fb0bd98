//! The Brown corpus split by document, stratified by genre.

use dp_models::data::BrownText;

/// Which part of the corpus a document is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Training documents (414 of the 500).
    Train,
    /// Validation documents (45): tuning only.
    Validation,
    /// Test documents (41).
    Test,
}

/// The documents of each part.
#[derive(Clone, Debug, Default)]
pub struct DocumentSplit {
    /// Training documents.
    pub train: Vec<BrownText>,
    /// Validation documents.
    pub validation: Vec<BrownText>,
    /// Test documents.
    pub test: Vec<BrownText>,
}

/// The part of the `index`-th document (in file-name order) of its genre: the 9th of every
/// ten is validation, the 10th test, the rest train — deterministic, and every genre with
/// ten or more documents is in all three parts (the Brown corpus: 6 to 80 per genre).
pub fn part_of(index_in_genre: usize) -> Part {
    match index_in_genre % 10 {
        8 => Part::Validation,
        9 => Part::Test,
        _ => Part::Train,
    }
}

/// Splits `documents` (any order) by document: sorted by name, numbered within their
/// genre, assigned by [`part_of`].
pub fn split_documents(mut documents: Vec<BrownText>) -> DocumentSplit {
    documents.sort_by(|a, b| a.name.cmp(&b.name));
    let mut split = DocumentSplit::default();
    let mut genre: Option<char> = None;
    let mut index = 0;
    for document in documents {
        if genre != Some(document.category) {
            (genre, index) = (Some(document.category), 0);
        }
        let part = match part_of(index) {
            Part::Train => &mut split.train,
            Part::Validation => &mut split.validation,
            Part::Test => &mut split.test,
        };
        part.push(document);
        index += 1;
    }
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &str) -> BrownText {
        BrownText {
            name: name.into(),
            category: name.chars().nth(1).unwrap_or('?'),
            text: format!("text of {name}"),
        }
    }

    #[test]
    fn every_genre_is_split_by_document() {
        let mut docs: Vec<BrownText> = (1..=20).map(|i| doc(&format!("ca{i:02}"))).collect();
        docs.extend((1..=9).map(|i| doc(&format!("cr{i:02}"))));
        docs.reverse(); // order of the input does not matter
        let split = split_documents(docs);
        let names = |d: &[BrownText]| d.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&split.validation), ["ca09", "ca19", "cr09"]);
        assert_eq!(names(&split.test), ["ca10", "ca20"]);
        assert_eq!(split.train.len(), 16 + 8);
    }
}
