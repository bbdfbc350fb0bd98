//! UCI Adult (Kohavi & Becker 1996) with the LIBSVM a9a-style 123-feature binarisation
//! used by the GDP paper's Adult experiment (`docs/reproduction/gdp.md`, "Experiment settings").
//!
//! Each of the 8 categorical attributes becomes one indicator per category (a missing
//! value `?` leaves its block all zero, as in a9a); each of the 6 continuous attributes
//! becomes one-hot quantile bins: 5 for age, fnlwgt, education-num and hours-per-week,
//! 2 (zero / positive) for capital-gain and capital-loss. Blocks follow the attribute
//! order, 5+8+5+16+5+7+14+6+5+2+2+2+5+41 = 123 features. Platt's original bin edges are
//! not published: ours are the quintiles of `adult.data` (documented in
//! `docs/reproduction/gdp.md`).

use super::locate::{DataLocator, DatasetFile};
use super::Dataset;
use crate::error::{Error, Result};

/// `adult.data` (32,561 records) and `adult.test` (16,281 records after its header line).
pub const ADULT: [DatasetFile; 2] = [
    DatasetFile {
        dataset: "adult",
        names: &["adult.data"],
        sha256: "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
        url: "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/adult.data",
    },
    DatasetFile {
        dataset: "adult",
        names: &["adult.test"],
        sha256: "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
        url: "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/adult.test",
    },
];

/// The number of binary features.
pub const ADULT_FEATURES: usize = 123;

/// Which records train and which test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdultSplit {
    /// The GDP paper's TF code: the 32,561 `adult.data` records, tested on the last fold
    /// of an unshuffled 10-fold split (train 29,305, test 3,256).
    LastFoldOfTrain,
    /// UCI's own split: `adult.data` (32,561) and `adult.test` (16,281).
    Official,
}

const CATEGORIES: [(usize, &[&str]); 8] = [
    (
        1,
        &[
            "Private",
            "Self-emp-not-inc",
            "Self-emp-inc",
            "Federal-gov",
            "Local-gov",
            "State-gov",
            "Without-pay",
            "Never-worked",
        ],
    ),
    (
        3,
        &[
            "Bachelors",
            "Some-college",
            "11th",
            "HS-grad",
            "Prof-school",
            "Assoc-acdm",
            "Assoc-voc",
            "9th",
            "7th-8th",
            "12th",
            "Masters",
            "1st-4th",
            "10th",
            "Doctorate",
            "5th-6th",
            "Preschool",
        ],
    ),
    (
        5,
        &[
            "Married-civ-spouse",
            "Divorced",
            "Never-married",
            "Separated",
            "Widowed",
            "Married-spouse-absent",
            "Married-AF-spouse",
        ],
    ),
    (
        6,
        &[
            "Tech-support",
            "Craft-repair",
            "Other-service",
            "Sales",
            "Exec-managerial",
            "Prof-specialty",
            "Handlers-cleaners",
            "Machine-op-inspct",
            "Adm-clerical",
            "Farming-fishing",
            "Transport-moving",
            "Priv-house-serv",
            "Protective-serv",
            "Armed-Forces",
        ],
    ),
    (
        7,
        &[
            "Wife",
            "Own-child",
            "Husband",
            "Not-in-family",
            "Other-relative",
            "Unmarried",
        ],
    ),
    (
        8,
        &[
            "White",
            "Asian-Pac-Islander",
            "Amer-Indian-Eskimo",
            "Other",
            "Black",
        ],
    ),
    (9, &["Female", "Male"]),
    (
        13,
        &[
            "United-States",
            "Cambodia",
            "England",
            "Puerto-Rico",
            "Canada",
            "Germany",
            "Outlying-US(Guam-USVI-etc)",
            "India",
            "Japan",
            "Greece",
            "South",
            "China",
            "Cuba",
            "Iran",
            "Honduras",
            "Philippines",
            "Italy",
            "Poland",
            "Jamaica",
            "Vietnam",
            "Mexico",
            "Portugal",
            "Ireland",
            "France",
            "Dominican-Republic",
            "Laos",
            "Ecuador",
            "Taiwan",
            "Haiti",
            "Columbia",
            "Hungary",
            "Guatemala",
            "Nicaragua",
            "Scotland",
            "Thailand",
            "Yugoslavia",
            "El-Salvador",
            "Trinadad&Tobago",
            "Peru",
            "Hong",
            "Holand-Netherlands",
        ],
    ),
];

/// Continuous attributes (column, bins): quantile bins, or zero/positive when 2.
const CONTINUOUS: [(usize, usize); 6] = [(0, 5), (2, 5), (4, 5), (10, 2), (11, 2), (12, 5)];

/// One parsed record: the 14 attribute strings and the label (`>50K` → 1).
#[derive(Clone, Debug, PartialEq)]
pub struct AdultRecord {
    /// The attributes, trimmed, in file order.
    pub fields: Vec<String>,
    /// 1 for income `>50K`, else 0.
    pub label: u32,
}

/// Parses `adult.data` / `adult.test` text: skips blank lines and the test file's
/// `|1x3 Cross validator` header, accepts the test file's trailing dots on labels.
/// `name` is used in errors.
pub fn parse_adult(text: &str, name: &str) -> Result<Vec<AdultRecord>> {
    let mut records = Vec::new();
    for (line_no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('|') {
            continue;
        }
        let mut fields: Vec<String> = line.split(',').map(|f| f.trim().to_string()).collect();
        if fields.len() != 15 {
            return Err(Error::CorruptFile {
                path: name.into(),
                reason: format!(
                    "line {}: {} fields, expected 15 (truncated file?)",
                    line_no + 1,
                    fields.len()
                ),
            });
        }
        let label = match fields.pop().as_deref().map(|l| l.trim_end_matches('.')) {
            Some(">50K") => 1,
            Some("<=50K") => 0,
            other => {
                return Err(Error::CorruptFile {
                    path: name.into(),
                    reason: format!("line {}: unknown label {other:?}", line_no + 1),
                })
            }
        };
        records.push(AdultRecord { fields, label });
    }
    Ok(records)
}

/// The a9a-style binariser: quantile edges fitted on one set of records.
#[derive(Clone, Debug, PartialEq)]
pub struct AdultBinariser {
    /// For each continuous attribute, the bin edges (a value goes to the number of
    /// edges it exceeds).
    edges: Vec<Vec<f64>>,
}

impl AdultBinariser {
    /// Fits the quintile edges (and the zero/positive split) on `records`.
    pub fn fit(records: &[AdultRecord]) -> Result<Self> {
        let mut edges = Vec::new();
        for &(column, bins) in &CONTINUOUS {
            if bins == 2 {
                edges.push(vec![0.0]);
                continue;
            }
            let mut values = records
                .iter()
                .map(|r| numeric(r, column))
                .collect::<Result<Vec<_>>>()?;
            if values.is_empty() {
                return Err(Error::invalid_data(
                    "Adult",
                    "no Adult records to fit bins on",
                ));
            }
            values.sort_by(f64::total_cmp);
            edges.push(
                (1..bins)
                    .map(|k| values[(k * values.len() / bins).min(values.len() - 1)])
                    .collect(),
            );
        }
        Ok(AdultBinariser { edges })
    }

    /// The 123 binary features of one record, in a9a's block order.
    pub fn features(&self, record: &AdultRecord) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(ADULT_FEATURES);
        let mut continuous = CONTINUOUS.iter().zip(&self.edges).peekable();
        let mut categorical = CATEGORIES.iter().peekable();
        for column in 0..14 {
            if let Some(&(&(_, bins), edges)) = continuous.peek().filter(|c| c.0 .0 == column) {
                let value = numeric(record, column)?;
                let bin = edges.iter().filter(|&&e| value > e).count();
                out.extend((0..bins).map(|b| if b == bin { 1.0 } else { 0.0 }));
                continuous.next();
            } else if let Some(&&(_, names)) = categorical.peek().filter(|c| c.0 == column) {
                let value = record.fields[column].as_str();
                if value != "?" && !names.contains(&value) {
                    return Err(Error::CorruptFile {
                        path: "adult".into(),
                        reason: format!("unknown category {value:?} in column {column}"),
                    });
                }
                out.extend(names.iter().map(|&n| if n == value { 1.0 } else { 0.0 }));
                categorical.next();
            }
        }
        debug_assert_eq!(out.len(), ADULT_FEATURES);
        Ok(out)
    }

    /// A [`Dataset`] of 123-dimensional rows and binary labels.
    pub fn dataset(&self, records: &[AdultRecord]) -> Result<Dataset> {
        let mut features = Vec::with_capacity(records.len() * ADULT_FEATURES);
        for r in records {
            features.extend(self.features(r)?);
        }
        Ok(Dataset {
            features,
            labels: records.iter().map(|r| r.label).collect(),
            shape: vec![ADULT_FEATURES],
            classes: 2,
        })
    }
}

fn numeric(record: &AdultRecord, column: usize) -> Result<f64> {
    record.fields[column]
        .parse::<f64>()
        .map_err(|_| Error::CorruptFile {
            path: "adult".into(),
            reason: format!(
                "column {column}: {:?} is not a number",
                record.fields[column]
            ),
        })
}

/// Adult (train, test) binarised, from `locator`.
pub fn load_adult(locator: &DataLocator, split: AdultSplit) -> Result<(Dataset, Dataset)> {
    let text = |file: &DatasetFile| -> Result<String> {
        String::from_utf8(locator.read(file)?).map_err(|_| Error::CorruptFile {
            path: file.names[0].into(),
            reason: "not UTF-8 text".into(),
        })
    };
    let data = parse_adult(&text(&ADULT[0])?, "adult.data")?;
    let binariser = AdultBinariser::fit(&data)?;
    match split {
        AdultSplit::LastFoldOfTrain => {
            // scikit-learn KFold(10): the first n mod 10 folds get one extra record, so
            // the last fold is the final ⌊n/10⌋ records.
            let cut = data.len() - data.len() / 10;
            Ok((
                binariser.dataset(&data[..cut])?,
                binariser.dataset(&data[cut..])?,
            ))
        }
        AdultSplit::Official => {
            let test = parse_adult(&text(&ADULT[1])?, "adult.test")?;
            Ok((binariser.dataset(&data)?, binariser.dataset(&test)?))
        }
    }
}

/// Adult (train, test), found through [`DataLocator::from_env`].
pub fn adult(split: AdultSplit) -> Result<(Dataset, Dataset)> {
    load_adult(&DataLocator::from_env(), split)
}
