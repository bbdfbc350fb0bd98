//! The real data files, where CI has them.

use dp_models::data::DataLocator;

/// A locator for `DP_DATA_DIR` only (no cache, no download), or `None` with a note on
/// stderr when it is unset and the real-data check `what` is skipped.
pub fn locator(what: &str) -> Option<DataLocator> {
    let Some(dir) = std::env::var_os("DP_DATA_DIR") else {
        eprintln!("DP_DATA_DIR unset: skipping {what}");
        return None;
    };
    Some(DataLocator::new(
        Some(DataLocator::resolve_data_dir(dir.as_ref())),
        None,
        false,
    ))
}
