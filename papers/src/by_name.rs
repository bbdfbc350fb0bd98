//! Settings a config writes by name, where the harness knows some names itself and the
//! papers register the rest (a training run's algorithm and model): read and written as
//! that name, an unknown one refused with every known name listed.

use serde::{Deserialize, Deserializer, Serializer};

/// A setting named in a config: the harness's own values, or one a paper registers.
pub trait ByName: Copy + PartialEq + Sized + 'static {
    /// What it is, for the refusal of an unknown name ("algorithm").
    const WHAT: &'static str;
    /// The harness's own values.
    const OWN: &'static [Self];
    /// Its name in a config (and in a run's cache key).
    fn name(self) -> &'static str;
    /// The value a paper registers under `name`.
    fn registered(name: &str) -> Option<Self>;
    /// Every name the papers register.
    fn registered_names() -> Vec<&'static str>;

    /// The setting named `name`, the harness's own or a registered paper's.
    fn from_name(name: &str) -> Option<Self> {
        let own = Self::OWN.iter().copied().find(|own| own.name() == name);
        own.or_else(|| Self::registered(name))
    }

    /// Every name it may take.
    fn known() -> Vec<&'static str> {
        let own = Self::OWN.iter().map(|own| own.name());
        own.chain(Self::registered_names()).collect()
    }
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

/// `Serialize` and `Deserialize` of a [`ByName`] type, as its name.
macro_rules! serde_by_name {
    ($type:ty) => {
        impl serde::Serialize for $type {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                $crate::by_name::serialize(*self, serializer)
            }
        }

        impl<'de> serde::Deserialize<'de> for $type {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                $crate::by_name::deserialize(deserializer)
            }
        }
    };
}
pub(crate) use serde_by_name;

/// Every own value reads back from its name; every registered name is unique, apart from
/// the own names, and reads back as registered.
#[cfg(test)]
pub fn check_names<T: ByName + std::fmt::Debug>() {
    for &own in T::OWN {
        assert_eq!(T::from_name(own.name()), Some(own));
    }
    let mut names = T::registered_names();
    names.sort_unstable();
    let all = names.len();
    names.dedup();
    assert_eq!(names.len(), all, "{names:?}");
    for name in names {
        assert!(!T::OWN.iter().any(|own| own.name() == name), "{name}");
        assert_eq!(T::from_name(name), T::registered(name));
    }
}
