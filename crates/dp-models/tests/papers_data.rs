//! The GDP paper's loaders (Adult, IMDB, MovieLens) on fixtures written in the original
//! formats, and Adult on the real file when `DP_DATA_DIR` has it.

use std::io::Write;
use std::path::PathBuf;

use dp_models::data::{brown_from_tar_gz, brown_texts_from_tar_gz, parse_brown_file};
use dp_models::data::{
    encode, imdb_datasets, load_adult, load_imdb, load_movielens_1m, movielens_datasets,
    parse_adult, parse_ratings, ratings_from_zip, reviews_from_tar_gz, AdultBinariser, AdultSplit,
    DataLocator, ImdbOptions,
};
use dp_models::Error;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dp-models-papers-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

const ADULT_LINES: &str = "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, 40, United-States, <=50K
50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, 13, United-States, <=50K
52, ?, 209642, HS-grad, 9, Married-civ-spouse, ?, Husband, White, Male, 0, 0, 45, ?, >50K
";

#[test]
fn adult_fixture_binarises_into_123_a9a_blocks() {
    let test_text = format!(
        "|1x3 Cross validator\n{}\n",
        ADULT_LINES.replace("K\n", "K.\n")
    );
    let train = parse_adult(ADULT_LINES, "adult.data").expect("parse");
    let test = parse_adult(&test_text, "adult.test").expect("parse test");
    assert_eq!(train.len(), 3);
    assert_eq!(test.len(), 3);
    assert_eq!(
        train.iter().map(|r| r.label).collect::<Vec<_>>(),
        test.iter().map(|r| r.label).collect::<Vec<_>>()
    );
    assert_eq!(train[2].label, 1);
    let binariser = AdultBinariser::fit(&train).expect("fit");
    let data = binariser.dataset(&train).expect("dataset");
    assert_eq!(data.shape, vec![123]);
    let row = |i: usize| &data.features[i * 123..][..123];
    // 14 attributes, one indicator each; the third record misses 3 categorical values.
    assert_eq!(row(0).iter().sum::<f32>(), 14.0);
    assert_eq!(row(2).iter().sum::<f32>(), 11.0);
    // Block offsets: workclass starts at 5, State-gov is its 6th category.
    assert_eq!(row(0)[5 + 5], 1.0);
    // capital-gain (offset 5+8+5+16+5+7+14+6+5+2 = 73): positive for record 0 only.
    assert_eq!((row(0)[74], row(1)[73]), (1.0, 1.0));
    // Native country United-States is feature 82 (offset 82).
    assert_eq!((row(0)[82], row(2)[82]), (1.0, 0.0));
    assert!(data.features.iter().all(|&v| v == 0.0 || v == 1.0));
    // Typed errors: a truncated line and an unknown label.
    let truncated = "39, State-gov, 77516\n";
    assert!(matches!(
        parse_adult(truncated, "adult.data"),
        Err(Error::CorruptFile { .. })
    ));
    let bad_label = ADULT_LINES.replace("<=50K\n50", "maybe\n50");
    assert!(matches!(
        parse_adult(&bad_label, "adult.data"),
        Err(Error::CorruptFile { .. })
    ));
}

#[test]
fn real_adult_when_present() {
    let Some(dir) = std::env::var_os("DP_DATA_DIR") else {
        eprintln!("DP_DATA_DIR unset: skipping the real Adult check");
        return;
    };
    let locator = DataLocator::new(
        Some(DataLocator::resolve_data_dir(dir.as_ref())),
        None,
        false,
    );
    let (train, test) = load_adult(&locator, AdultSplit::LastFoldOfTrain).expect("adult");
    assert_eq!((train.len(), test.len()), (29_305, 3_256));
    assert_eq!(train.example_size(), 123);
    let positives = train.labels.iter().filter(|&&y| y == 1).count()
        + test.labels.iter().filter(|&&y| y == 1).count();
    assert_eq!(positives, 7_841);
    for row in train.features.chunks(123) {
        let ones = row.iter().sum::<f32>();
        assert!((11.0..=14.0).contains(&ones), "{ones} indicators");
    }
    let (train, test) = load_adult(&locator, AdultSplit::Official).expect("official");
    assert_eq!((train.len(), test.len()), (32_561, 16_281));
    assert_eq!(test.labels.iter().filter(|&&y| y == 1).count(), 3_846);
}

fn acl_imdb_fixture() -> Vec<u8> {
    let files = [
        (
            "aclImdb/train/pos/0_9.txt",
            "A great film, great acting.<br />Great!",
        ),
        ("aclImdb/train/neg/1_2.txt", "A dull film. Dull, dull plot."),
        ("aclImdb/train/unsup/2_0.txt", "ignored unlabelled review"),
        ("aclImdb/test/pos/0_10.txt", "great great film"),
        ("aclImdb/test/neg/0_1.txt", "unseen words only"),
        ("aclImdb/README", "not a review"),
    ];
    crate::fixtures::tar_gz(&files)
}

#[test]
fn imdb_fixture_in_the_archive_format() {
    let bytes = acl_imdb_fixture();
    let reviews = reviews_from_tar_gz(&bytes, "aclImdb_v1.tar.gz").expect("reviews");
    assert_eq!(reviews.len(), 4, "unsup/ and README are skipped");
    let options = ImdbOptions {
        num_words: 6,
        max_len: 5,
    };
    let (train, test) = imdb_datasets(&reviews, options);
    assert_eq!((train.len(), test.len()), (2, 2));
    assert_eq!(train.shape, vec![5]);
    // Training counts: dull 3, great 3, a 2, film 2, … → ids: dull 3, great 4, a 5.
    let (neg, pos) = (&train.features[..5], &train.features[5..]);
    assert_eq!(train.labels, vec![0, 1]);
    // neg: [1, a, dull, film→OOV, dull, dull, plot→OOV] keeps its last 5.
    assert_eq!(neg, &[3.0, 2.0, 3.0, 3.0, 2.0], "truncated at the front");
    assert_eq!(pos, &[4.0, 2.0, 4.0, 2.0, 4.0]);
    assert_eq!(
        &test.features[..5],
        &[0.0, 1.0, 2.0, 2.0, 2.0],
        "padded at the front"
    );
    let vocabulary = std::collections::HashMap::from([("great".to_string(), 3)]);
    assert_eq!(encode("Great", &vocabulary, 3), vec![0, 1, 3]);
    // Through the locator: a wrong archive is refused by its MD5; an unpacked directory
    // is used as is; nothing at all is "data not present".
    let dir = temp_dir("imdb");
    std::fs::create_dir_all(dir.join("imdb")).expect("dir");
    std::fs::write(dir.join("imdb/aclImdb_v1.tar.gz"), &bytes).expect("write");
    let locator = DataLocator::new(Some(dir.clone()), None, false);
    let err = load_imdb(&locator, options).expect_err("md5 mismatch");
    assert!(matches!(err, Error::CorruptFile { .. }), "{err}");
    tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]))
        .unpack(dir.join("imdb"))
        .expect("unpack");
    let (train2, test2) = load_imdb(&locator, options).expect("unpacked");
    assert_eq!((train2, test2), (train, test));
    let empty = DataLocator::new(Some(temp_dir("imdb-empty")), None, false);
    let err = load_imdb(&empty, options).expect_err("absent");
    assert!(matches!(err, Error::DataNotPresent { .. }));
    assert!(err.to_string().starts_with("data not present"), "{err}");
}

#[test]
fn movielens_fixture_in_the_zip_format() {
    let ratings_dat = "1::1193::5::978300760\n1::661::3::978302109\n2::1193::4::978298413\n3::3408::1::978300275\n3::661::2::978300275\n";
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file(
        "ml-1m/ratings.dat",
        zip::write::SimpleFileOptions::default(),
    )
    .expect("start");
    zip.write_all(ratings_dat.as_bytes()).expect("write");
    let bytes = zip.finish().expect("finish").into_inner();
    let text = ratings_from_zip(&bytes, "ml-1m.zip").expect("unzip");
    let ratings = parse_ratings(&text, "ratings.dat").expect("parse");
    assert_eq!(ratings.len(), 5);
    let (train, test, shape) = movielens_datasets(&ratings, 0.2, 100).expect("split");
    assert_eq!((train.len(), test.len()), (4, 1));
    assert_eq!((shape.users, shape.items), (3, 3));
    assert_eq!(train.classes, 5);
    // Dense movie ranks: 661 → 0, 1193 → 1, 3408 → 2; labels are stars − 1.
    let mut pairs: Vec<(u32, u32, u32)> = train
        .features
        .chunks(2)
        .chain(test.features.chunks(2))
        .zip(train.labels.iter().chain(&test.labels))
        .map(|(f, &y)| (f[0] as u32, f[1] as u32, y))
        .collect();
    pairs.sort();
    assert_eq!(
        pairs,
        vec![(0, 0, 2), (0, 1, 4), (1, 1, 3), (2, 0, 1), (2, 2, 0)]
    );
    assert!(matches!(
        parse_ratings("1::2::7::0\n", "ratings.dat"),
        Err(Error::CorruptFile { .. })
    ));
    let empty = DataLocator::new(Some(temp_dir("ml-empty")), None, false);
    assert!(matches!(
        load_movielens_1m(&empty, 100),
        Err(Error::DataNotPresent { .. })
    ));
}

fn cifar_record(label: u8, fill: u8) -> Vec<u8> {
    let mut r = vec![label];
    r.extend(std::iter::repeat_n(fill, 3072));
    r
}

#[test]
fn cifar10_fixture_in_the_binary_archive_format() {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (i, name) in [
        "data_batch_1.bin",
        "data_batch_2.bin",
        "data_batch_3.bin",
        "data_batch_4.bin",
        "data_batch_5.bin",
        "test_batch.bin",
    ]
    .iter()
    .enumerate()
    {
        let bytes = [cifar_record(i as u8, 0), cifar_record(9, 255)].concat();
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(
                &mut header,
                format!("cifar-10-batches-bin/{name}"),
                &bytes[..],
            )
            .expect("append");
    }
    let archive = builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .expect("tar.gz");
    let (train, test) =
        dp_models::data::cifar10_from_tar_gz(&archive, "cifar-10-binary.tar.gz").expect("cifar");
    assert_eq!((train.len(), test.len()), (10, 2));
    assert_eq!(train.shape, vec![3, 32, 32]);
    assert_eq!(&train.labels[..4], &[0, 9, 1, 9]);
    assert_eq!(test.labels, vec![5, 9]);
    // Channel planes normalised with Tramèr & Boneh's mean and std: a black pixel of the
    // red plane is −0.485/0.229, a white pixel of the blue plane (1 − 0.406)/0.225.
    assert!((train.features[0] + 0.485 / 0.229).abs() < 1e-6);
    let white_blue = train.features[3072 + 2048];
    assert!((white_blue - (1.0 - 0.406) / 0.225).abs() < 1e-5);
    // A truncated batch and an out-of-range label are typed errors.
    assert!(matches!(
        dp_models::data::parse_cifar10_records(&[3u8; 100], "x.bin"),
        Err(Error::CorruptFile { .. })
    ));
    assert!(matches!(
        dp_models::data::parse_cifar10_records(&cifar_record(10, 0), "x.bin"),
        Err(Error::CorruptFile { .. })
    ));
    let empty = DataLocator::new(Some(temp_dir("cifar-empty")), None, false);
    assert!(matches!(
        dp_models::data::load_cifar10(&empty),
        Err(Error::DataNotPresent { .. })
    ));
    let net = dp_models::models::cifar10_cnn(
        dp_models::models::Activation::Tanh,
        &mut dp_mechanisms::NoiseSource::seeded(0),
    )
    .expect("cnn");
    assert_eq!(dp_models::PrivateModel::num_params(&net), 550_570);
    assert_eq!(net.executor(), dp_models::nn::Executor::Fused);
}

fn brown_fixture() -> Vec<u8> {
    let files = [
        (
            "package/ca01",
            "\n\n\tThe/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd ,/, 1913/cd well-known/jj it's/pps+bez ./.\n",
        ),
        ("package/cb02", "\tThe/at jury/nn said/vbd ./.\n"),
        ("package/cats.txt", "ca01 news\ncb02 editorial\n"),
        ("package/README", "not a document"),
    ];
    crate::fixtures::tar_gz(&files)
}

#[test]
fn brown_tagged_files_parse_to_lowercase_words() -> dp_models::Result<()> {
    assert_eq!(
        parse_brown_file("The/at Jury/nn-tl ,/, 1913/cd well-known/jj it's/pps+bez"),
        vec!["the", "jury"]
    );
    let documents = brown_from_tar_gz(&brown_fixture())?;
    assert_eq!(documents.len(), 2, "cats.txt and README are not documents");
    assert_eq!(
        documents[0],
        vec!["the", "fulton", "county", "grand", "jury", "said"]
    );
    assert_eq!(documents[1], vec!["the", "jury", "said"]);
    Ok(())
}

#[test]
fn brown_texts_keep_case_punctuation_and_sentences() -> dp_models::Result<()> {
    let texts = brown_texts_from_tar_gz(&brown_fixture())?;
    assert_eq!(texts.len(), 2, "cats.txt and README are not documents");
    assert_eq!((texts[0].name.as_str(), texts[0].category), ("ca01", 'a'));
    assert_eq!(
        texts[0].text,
        "The Fulton County Grand Jury said , 1913 well-known it's ."
    );
    assert_eq!((texts[1].name.as_str(), texts[1].category), ("cb02", 'b'));
    assert_eq!(
        dp_models::data::brown_file_text("\n\tA/at b/nn ./.\n\n\tC/np d/vb ./.\n"),
        "A b .\nC d ."
    );
    Ok(())
}
