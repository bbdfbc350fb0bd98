//! Dataset lookup and the IDX loader, on fixtures in the original format and, when
//! `DP_DATA_DIR` is set, on the real files.

use std::io::Write;
use std::path::{Path, PathBuf};

use dp_models::data::{load_idx, parse_images, parse_labels, DataLocator, DatasetFile, MNIST};
use dp_models::Error;

fn idx3(n: u32, rows: u32, cols: u32, pixels: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [2051, n, rows, cols] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(pixels);
    v
}

fn idx1(labels: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [2049, labels.len() as u32] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(labels);
    v
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dp-models-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn idx_parsing_and_typed_errors() {
    let path = Path::new("fixture");
    let images = idx3(2, 2, 2, &[0, 255, 51, 102, 1, 2, 3, 4]);
    let (n, r, c, px) = parse_images(&images, path).expect("valid");
    assert_eq!((n, r, c), (2, 2, 2));
    assert_eq!(px[1], 1.0);
    assert!((px[2] - 0.2).abs() < 1e-7);
    assert_eq!(
        parse_labels(&idx1(&[3, 7]), path).expect("valid"),
        vec![3, 7]
    );
    // Truncated, wrong magic, short header: typed errors that name the file.
    for bad in [&images[..images.len() - 1], &images[..10], &idx1(&[1])[..]] {
        match parse_images(bad, path) {
            Err(Error::CorruptFile { path, .. }) => assert_eq!(path, Path::new("fixture")),
            other => panic!("expected CorruptFile, got {other:?}"),
        }
    }
    assert!(matches!(
        parse_labels(&idx1(&[1, 2])[..9], path),
        Err(Error::CorruptFile { .. })
    ));
}

/// A gzip fixture under DP_DATA_DIR-style layout is found, decompressed and verified; a
/// corrupted copy is refused with its path; a missing file says where it looked.
#[test]
fn locator_finds_verifies_and_reports() {
    let dir = temp_dir("locate");
    let content = idx1(&[1, 2, 3]);
    let file = DatasetFile {
        dataset: "toy",
        names: &["labels-idx1-ubyte", "labels.idx1-ubyte"],
        sha256: Box::leak(sha256_hex(&content).into_boxed_str()),
        url: "https://example.invalid/labels.gz",
    };
    std::fs::create_dir_all(dir.join("toy")).expect("dir");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&content).expect("gzip");
    std::fs::write(
        dir.join("toy/labels.idx1-ubyte.gz"),
        gz.finish().expect("gzip"),
    )
    .expect("write");
    let locator = DataLocator::new(Some(dir.clone()), None, false);
    assert_eq!(locator.read(&file).expect("found"), content);

    std::fs::write(dir.join("toy/labels.idx1-ubyte.gz"), b"not gzip").expect("write");
    match locator.read(&file) {
        Err(Error::CorruptFile { path, .. }) => assert!(path.ends_with("toy/labels.idx1-ubyte.gz")),
        other => panic!("expected CorruptFile, got {other:?}"),
    }
    std::fs::write(dir.join("toy/labels.idx1-ubyte.gz"), b"").expect("write");
    std::fs::remove_file(dir.join("toy/labels.idx1-ubyte.gz")).expect("rm");
    let cache = temp_dir("cache");
    let offline = DataLocator::new(Some(dir.clone()), Some(cache.clone()), false);
    let message = offline.read(&file).expect_err("missing").to_string();
    assert!(
        message.contains("data not present")
            && message.contains(&dir.join("toy").display().to_string())
            && message.contains(&cache.join("toy").display().to_string()),
        "{message}"
    );
    assert!(message.contains("DP_OFFLINE"), "{message}");
}

/// The real MNIST, when `DP_DATA_DIR` points at it (CI sets it to ../shared/data).
#[test]
fn real_mnist_when_present() {
    let Some(dir) = std::env::var_os("DP_DATA_DIR") else {
        eprintln!("DP_DATA_DIR unset: skipping the real-data check");
        return;
    };
    let locator = DataLocator::new(
        Some(DataLocator::resolve_data_dir(dir.as_ref())),
        None,
        false,
    );
    let (train, test) = load_idx(&locator, &MNIST).expect("MNIST loads from DP_DATA_DIR");
    assert_eq!((train.len(), test.len()), (60_000, 10_000));
    assert_eq!(train.shape, vec![1, 28, 28]);
    let zeros = train.labels.iter().filter(|&&y| y == 0).count();
    assert_eq!(zeros, 5923, "official MNIST class count");
    assert!(train.features.iter().all(|&p| (0.0..=1.0).contains(&p)));
}
