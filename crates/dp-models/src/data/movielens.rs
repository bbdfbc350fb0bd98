//! MovieLens-1M (Harper & Konstan 2015) ratings for the GDP paper's recommender
//! experiment (`docs/reproduction/gdp.md`, "Experiment settings").
//!
//! `ratings.dat` lines are `UserID::MovieID::Rating::Timestamp`. Users are 1..=6040
//! (→ 0-based), movie ids are dense-ranked (→ 0..3706), the label is rating − 1 (a
//! 5-class softmax, scored by RMSE of its expectation). Features are `[user, item]` as
//! `f32`. The paper's split is scikit-learn's `train_test_split(test_size = 0.2,
//! random_state = 100)`, which depends on NumPy's Mersenne Twister; ours is an 80/20
//! split by a seeded ChaCha20 permutation (documented in `docs/reproduction/gdp.md`).

use std::collections::BTreeMap;
use std::io::Read;

use dp_mechanisms::NoiseSource;

use super::locate::{ArchiveFile, DataLocator};
use super::Dataset;
use crate::error::{Error, Result};

/// The canonical archive (GroupLens).
pub const MOVIELENS_1M: ArchiveFile = ArchiveFile {
    dataset: "movielens",
    name: "ml-1m.zip",
    md5: "c4d9eecfca2ab87c1945afe126590906",
    url: "https://files.grouplens.org/datasets/movielens/ml-1m.zip",
};

/// One rating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rating {
    /// The user id as in the file (1-based).
    pub user: u32,
    /// The movie id as in the file.
    pub movie: u32,
    /// 1..=5 stars.
    pub stars: u8,
}

/// Parses `ratings.dat`.
pub fn parse_ratings(text: &str, name: &str) -> Result<Vec<Rating>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| Error::CorruptFile {
            path: name.into(),
            reason: format!("line {}: {what}: {line:?}", i + 1),
        };
        let fields: Vec<&str> = line.trim().split("::").collect();
        if fields.len() != 4 {
            return Err(bad("expected UserID::MovieID::Rating::Timestamp"));
        }
        let user = fields[0].parse().map_err(|_| bad("bad user id"))?;
        let movie = fields[1].parse().map_err(|_| bad("bad movie id"))?;
        let stars: u8 = fields[2].parse().map_err(|_| bad("bad rating"))?;
        if !(1..=5).contains(&stars) || user == 0 {
            return Err(bad("rating outside 1..=5 or user id 0"));
        }
        out.push(Rating { user, movie, stars });
    }
    Ok(out)
}

/// `ml-1m/ratings.dat` from the zip archive's bytes.
pub fn ratings_from_zip(bytes: &[u8], name: &str) -> Result<String> {
    let corrupt = |reason: String| Error::CorruptFile {
        path: name.into(),
        reason,
    };
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| corrupt(e.to_string()))?;
    let mut file = archive
        .by_name("ml-1m/ratings.dat")
        .map_err(|e| corrupt(format!("ml-1m/ratings.dat: {e}")))?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| corrupt(e.to_string()))?;
    Ok(text)
}

/// The numbers of users and items of a ratings dataset built by [`movielens_datasets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovieLensShape {
    /// Users (max user id).
    pub users: usize,
    /// Distinct movies.
    pub items: usize,
}

/// (train, test, shape): `test_fraction` of the ratings, chosen by a permutation seeded
/// with `split_seed`, form the test set.
pub fn movielens_datasets(
    ratings: &[Rating],
    test_fraction: f64,
    split_seed: u64,
) -> Result<(Dataset, Dataset, MovieLensShape)> {
    if !(0.0..1.0).contains(&test_fraction) {
        return Err(Error::InvalidParameter {
            name: "test_fraction",
            value: test_fraction,
            reason: "must be in [0, 1)",
        });
    }
    let items: BTreeMap<u32, u32> = ratings
        .iter()
        .map(|r| (r.movie, 0))
        .collect::<BTreeMap<_, _>>()
        .into_keys()
        .enumerate()
        .map(|(rank, movie)| (movie, rank as u32))
        .collect();
    let users = ratings.iter().map(|r| r.user as usize).max().unwrap_or(0);
    let mut order: Vec<usize> = (0..ratings.len()).collect();
    let mut noise = NoiseSource::seeded(split_seed);
    for i in (1..order.len()).rev() {
        let j = ((noise.uniform() * (i + 1) as f64) as usize).min(i);
        order.swap(i, j);
    }
    let test_len = (ratings.len() as f64 * test_fraction).ceil() as usize;
    let make = |indices: &[usize]| {
        let mut features = Vec::with_capacity(indices.len() * 2);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let r = ratings[i];
            features.push((r.user - 1) as f32);
            features.push(items[&r.movie] as f32);
            labels.push(u32::from(r.stars - 1));
        }
        Dataset {
            features,
            labels,
            shape: vec![2],
            classes: 5,
        }
    };
    Ok((
        make(&order[test_len..]),
        make(&order[..test_len]),
        MovieLensShape {
            users,
            items: items.len(),
        },
    ))
}

/// MovieLens-1M (train, test, shape) from `locator`: an unpacked
/// `movielens/ml-1m/ratings.dat`, else the verified archive (downloaded if allowed).
pub fn load_movielens_1m(
    locator: &DataLocator,
    split_seed: u64,
) -> Result<(Dataset, Dataset, MovieLensShape)> {
    let text = match locator.unpacked_dir(MOVIELENS_1M.dataset, "ml-1m") {
        Some(dir) if dir.join("ratings.dat").is_file() => {
            let path = dir.join("ratings.dat");
            std::fs::read_to_string(&path).map_err(|source| Error::Io { path, source })?
        }
        _ => ratings_from_zip(&locator.read_archive(&MOVIELENS_1M)?, MOVIELENS_1M.name)?,
    };
    let ratings = parse_ratings(&text, "ratings.dat")?;
    movielens_datasets(&ratings, 0.2, split_seed)
}

/// MovieLens-1M, found through [`DataLocator::from_env`].
pub fn movielens_1m(split_seed: u64) -> Result<(Dataset, Dataset, MovieLensShape)> {
    load_movielens_1m(&DataLocator::from_env(), split_seed)
}
