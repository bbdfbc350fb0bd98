//! Settings a config writes by name, where the harness knows some names itself and the
//! papers register the rest (a training run's algorithm and model): read and written as
//! that name, an unknown one refused with every known name listed.

use serde::{Deserialize, Deserializer, Serializer};

/// A setting named in a config.
pub trait ByName: Copy + Sized {
    /// What it is, for the refusal of an unknown name ("algorithm").
    const WHAT: &'static str;
    /// Its name in a config (and in a run's cache key).
    fn name(self) -> &'static str;
    /// The setting named `name`, the harness's own or a registered paper's.
    fn from_name(name: &str) -> Option<Self>;
    /// Every name it may take.
    fn known() -> Vec<&'static str>;
}

/// Writes `value` as its name.
pub fn serialize<T: ByName, S: Serializer>(value: T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(value.name())
}

/// Reads a name; an unknown one is an error that lists the known.
pub fn deserialize<'de, T: ByName, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
    let name = String::deserialize(deserializer)?;
    T::from_name(&name).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown {} `{name}`: known are {}",
            T::WHAT,
            T::known().join(", ")
        ))
    })
}
