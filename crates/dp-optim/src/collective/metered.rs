//! A collective that counts what it exchanges: operations, bytes and the time spent in
//! them (transfer and waiting for the other ranks), for benchmarks and run summaries.

use std::time::Instant;

use super::Collective;
use crate::error::Result;

/// Totals of a [`Metered`] collective on this rank.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// Operations (all-reduce, broadcast, barrier) called.
    pub operations: u64,
    /// Bytes of the buffers passed (after a broadcast: as received).
    pub bytes: u64,
    /// Seconds inside the operations.
    pub seconds: f64,
}

/// `inner`, with its [`Traffic`] counted.
pub struct Metered<C> {
    inner: C,
    traffic: Traffic,
}

impl<C: Collective> Metered<C> {
    /// Counts the operations of `inner` from now on.
    pub fn new(inner: C) -> Self {
        Metered {
            inner,
            traffic: Traffic::default(),
        }
    }

    /// The totals so far.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// Counts afresh from now (e.g. after a one-off exchange, such as joining the group).
    pub fn reset(&mut self) {
        self.traffic = Traffic::default();
    }

    /// Runs `operation`, counting it with `bytes` (read after it ran).
    fn count<T>(
        &mut self,
        operation: impl FnOnce(&mut C) -> Result<T>,
        bytes: impl FnOnce(&T) -> usize,
    ) -> Result<T> {
        let started = Instant::now();
        let result = operation(&mut self.inner)?;
        self.traffic.operations += 1;
        self.traffic.bytes += bytes(&result) as u64;
        self.traffic.seconds += started.elapsed().as_secs_f64();
        Ok(result)
    }
}

impl<C: Collective> Collective for Metered<C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn world_size(&self) -> usize {
        self.inner.world_size()
    }

    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<()> {
        let bytes = std::mem::size_of_val(values);
        self.count(|c| c.all_reduce_sum(values), |_| bytes)
    }

    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<()> {
        let bytes = std::mem::size_of_val(values);
        self.count(|c| c.broadcast(values, root), |_| bytes)
    }

    fn broadcast_indices(&mut self, indices: &mut Vec<usize>, root: usize) -> Result<()> {
        self.count(
            |c| c.broadcast_indices(indices, root).map(|()| indices.len()),
            |&n| 8 * (n + 1),
        )
        .map(|_| ())
    }

    fn barrier(&mut self) -> Result<()> {
        self.count(|c| c.barrier(), |_| 0)
    }

    fn abort(&mut self, code: i32) {
        self.inner.abort(code);
    }
}

#[cfg(test)]
mod tests {
    use super::{Metered, Traffic};
    use crate::collective::{Collective, Solo};

    #[test]
    fn counts_operations_and_bytes() -> crate::Result<()> {
        let mut group = Metered::new(Solo);
        group.all_reduce_sum(&mut [1.0; 10])?;
        group.broadcast(&mut [0.0; 3], 0)?;
        group.broadcast_indices(&mut vec![1, 2], 0)?;
        group.barrier()?;
        let traffic = group.traffic();
        assert_eq!(traffic.operations, 4);
        assert_eq!(traffic.bytes, 40 + 12 + 24);
        assert!(traffic.seconds >= 0.0);
        group.reset();
        assert_eq!(group.traffic(), Traffic::default());
        Ok(())
    }
}
