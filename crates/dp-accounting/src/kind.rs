//! Accountants by name, for command lines and experiment configs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::accountant::{Accountant, PrivacyReport};
use crate::boxed::DynAccountant;
use crate::composition::ApproxDpConfig;
use crate::error::{Error, Result};
use crate::event::{DpEvent, NeighbouringRelation};
use crate::gdp::GdpConfig;
use crate::ledger::Ledger;
use crate::pld::PldConfig;
use crate::rdp::{Conversion, OrderGrid, RdpConfig};
use crate::zcdp::ZcdpConfig;

/// The accountants selectable by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccountantKind {
    /// RDP with the improved conversion.
    Rdp,
    /// RDP with the classic conversion (what most published tables used).
    RdpClassic,
    /// Privacy loss distributions (tight).
    Pld,
    /// The GDP central limit theorem (asymptotic).
    Gdp,
    /// zCDP.
    Zcdp,
    /// Basic/advanced composition of (ε, δ) guarantees.
    ApproxDp,
}

impl AccountantKind {
    /// The four accountants `--accountant all` shows for DP-SGD.
    pub const DP_SGD: [AccountantKind; 4] = [
        AccountantKind::Rdp,
        AccountantKind::RdpClassic,
        AccountantKind::Pld,
        AccountantKind::Gdp,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            AccountantKind::Rdp => "rdp",
            AccountantKind::RdpClassic => "rdp-classic",
            AccountantKind::Pld => "pld",
            AccountantKind::Gdp => "gdp",
            AccountantKind::Zcdp => "zcdp",
            AccountantKind::ApproxDp => "approx-dp",
        }
    }

    /// A fresh accountant of this kind (`orders` applies to the RDP kinds only).
    pub fn build(
        self,
        relation: NeighbouringRelation,
        orders: &OrderGrid,
    ) -> Result<Box<dyn DynAccountant>> {
        let rdp = |conversion| RdpConfig {
            orders: orders.clone(),
            conversion,
            relation,
            ..RdpConfig::default()
        };
        Ok(match self {
            AccountantKind::Rdp => Box::new(rdp(Conversion::Improved).build()?),
            AccountantKind::RdpClassic => Box::new(rdp(Conversion::Classic).build()?),
            AccountantKind::Pld => Box::new(
                PldConfig {
                    relation,
                    ..PldConfig::default()
                }
                .build()?,
            ),
            AccountantKind::Gdp => Box::new(GdpConfig { relation }.build()?),
            AccountantKind::Zcdp => Box::new(
                ZcdpConfig {
                    relation,
                    ..ZcdpConfig::default()
                }
                .build()?,
            ),
            AccountantKind::ApproxDp => Box::new(
                ApproxDpConfig {
                    relation,
                    ..ApproxDpConfig::default()
                }
                .build()?,
            ),
        })
    }
}

impl fmt::Display for AccountantKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AccountantKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        [
            AccountantKind::Rdp,
            AccountantKind::RdpClassic,
            AccountantKind::Pld,
            AccountantKind::Gdp,
            AccountantKind::Zcdp,
            AccountantKind::ApproxDp,
        ]
        .into_iter()
        .find(|k| k.name() == s)
        .ok_or_else(|| Error::Unsupported {
            accountant: "any",
            event: s.to_string(),
            reason: "unknown accountant (rdp, rdp-classic, pld, gdp, zcdp, approx-dp)".into(),
        })
    }
}

impl<A: Accountant + ?Sized> Accountant for Box<A> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn relation(&self) -> NeighbouringRelation {
        (**self).relation()
    }
    fn supports(&self, event: &DpEvent) -> Result<()> {
        (**self).supports(event)
    }
    fn compose(&mut self, event: &DpEvent, count: u64) -> Result<()> {
        (**self).compose(event, count)
    }
    fn ledger(&self) -> &Ledger {
        (**self).ledger()
    }
    fn epsilon_report(&self, target_delta: f64) -> Result<PrivacyReport> {
        (**self).epsilon_report(target_delta)
    }
    fn delta(&self, target_epsilon: f64) -> Result<f64> {
        (**self).delta(target_epsilon)
    }
    fn guarantee(&self) -> crate::Guarantee {
        (**self).guarantee()
    }
}
