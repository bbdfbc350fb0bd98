//! Fixtures in the original file formats of datasets that are not on this machine.

/// A `.tar.gz` archive of `(path, text)` files, as the canonical archives are packed.
pub fn tar_gz(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (path, text) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, path, text.as_bytes())
            .expect("append");
    }
    builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .expect("tar.gz")
}
