//! An accountant behind a box that can still be cloned, for dry runs of a charge.

use crate::accountant::Accountant;

/// An [`Accountant`] that can be cloned through a `Box` and sent to another thread.
///
/// [`AccountantKind::build`](crate::AccountantKind::build) returns one, so that code which
/// picks the accountant at run time can still compose a charge into a scratch copy first
/// (as [`BudgetFilter`](crate::BudgetFilter) does) and keep the real state unchanged when
/// the charge is refused. Every `Accountant + Clone + Send + Debug` type is one.
pub trait DynAccountant: Accountant + Send + std::fmt::Debug {
    /// A boxed copy of this accountant, with every event composed so far.
    fn boxed_clone(&self) -> Box<dyn DynAccountant>;
}

impl<A: Accountant + Clone + Send + std::fmt::Debug + 'static> DynAccountant for A {
    fn boxed_clone(&self) -> Box<dyn DynAccountant> {
        Box::new(self.clone())
    }
}

impl Clone for Box<dyn DynAccountant> {
    fn clone(&self) -> Self {
        (**self).boxed_clone()
    }
}
