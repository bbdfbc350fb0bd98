//! Training sequences: the privacy unit of the language-model table.
//!
//! Each document's tokens are cut into non-overlapping windows of `context + 1` tokens
//! (inputs are the first `context`, targets the last `context`); a shorter tail is
//! dropped. One window is one example, so the guarantee is per sequence: a document cut
//! into k windows is protected as a group of k (group privacy), and
//! [`Sequences::max_per_document`] reports the largest k.

/// The windows of a corpus part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequences {
    /// Tokens per window: `context + 1`.
    pub window: usize,
    /// The windows, concatenated (`len() = count × window`).
    pub tokens: Vec<u32>,
    /// The document each window comes from (index into the part's documents).
    pub document: Vec<usize>,
}

impl Sequences {
    /// Cuts each document's `tokens` into windows of `context + 1` tokens.
    pub fn cut(documents: &[Vec<u32>], context: usize) -> Sequences {
        let window = context + 1;
        let mut out = Sequences {
            window,
            tokens: Vec::new(),
            document: Vec::new(),
        };
        for (d, tokens) in documents.iter().enumerate() {
            for chunk in tokens.chunks_exact(window) {
                out.tokens.extend_from_slice(chunk);
                out.document.push(d);
            }
        }
        out
    }

    /// Number of windows (examples).
    pub fn len(&self) -> usize {
        self.document.len()
    }

    /// Whether there are no windows.
    pub fn is_empty(&self) -> bool {
        self.document.is_empty()
    }

    /// The most windows any one document contributes: the group size of a
    /// document-level reading of a per-sequence guarantee.
    pub fn max_per_document(&self) -> usize {
        let mut counts = std::collections::HashMap::new();
        for &d in &self.document {
            *counts.entry(d).or_insert(0usize) += 1;
        }
        counts.into_values().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_stay_inside_their_document() {
        let docs = vec![(0..10).collect::<Vec<u32>>(), vec![], (100..104).collect()];
        let s = Sequences::cut(&docs, 3);
        assert_eq!(s.window, 4);
        assert_eq!(s.tokens, [0, 1, 2, 3, 4, 5, 6, 7, 100, 101, 102, 103]);
        assert_eq!(s.document, [0, 0, 2]);
        assert_eq!((s.len(), s.max_per_document()), (3, 2));
        assert!(Sequences::cut(&[vec![1, 2]], 3).is_empty());
    }
}
