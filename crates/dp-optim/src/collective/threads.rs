//! Ranks as threads of one process: each operation is a rendezvous where every rank
//! deposits its buffer and reads all of them back in rank order. For tests of the
//! data-parallel protocol (the same code paths as a multi-process backend, without one).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::{check_root, Collective};
use crate::error::{Error, Result};

/// What one rank deposits in a round.
#[derive(Clone, Debug)]
enum Payload {
    Values(Vec<f32>),
    Indices(Vec<usize>),
    Nothing,
}

/// The rendezvous's state.
#[derive(Default)]
struct Round {
    /// This round's deposits, by rank.
    slots: Vec<Option<Payload>>,
    arrived: usize,
    /// Bumped when a round's deposits are complete.
    generation: u64,
    /// The completed round's deposits, until every rank has read them.
    complete: Option<Arc<Vec<Payload>>>,
    readers_left: usize,
    /// The first rank that left the group.
    left: Option<usize>,
}

struct Shared {
    world: usize,
    round: Mutex<Round>,
    changed: Condvar,
}

/// Builds groups of [`ThreadRank`]s.
#[derive(Debug)]
pub struct ThreadGroup;

impl ThreadGroup {
    /// A group of `world` ranks, one handle per rank (move each into its thread).
    pub fn ranks(world: usize) -> Result<Vec<ThreadRank>> {
        if world == 0 {
            return Err(Error::InvalidParameter {
                name: "world_size",
                value: 0.0,
                reason: "must be >= 1",
            });
        }
        let shared = Arc::new(Shared {
            world,
            round: Mutex::new(Round {
                slots: vec![None; world],
                ..Round::default()
            }),
            changed: Condvar::new(),
        });
        Ok((0..world)
            .map(|rank| ThreadRank {
                rank,
                shared: Arc::clone(&shared),
            })
            .collect())
    }
}

/// One rank of a [`ThreadGroup`]. Dropping it (the thread returns or panics) leaves the
/// group: every other rank's next operation fails.
pub struct ThreadRank {
    rank: usize,
    shared: Arc<Shared>,
}

impl ThreadRank {
    fn failure(&self, operation: &'static str, reason: impl Into<String>) -> Error {
        Error::Collective {
            operation,
            rank: self.rank,
            reason: reason.into(),
        }
    }

    fn lock(&self, operation: &'static str) -> Result<MutexGuard<'_, Round>> {
        self.shared
            .round
            .lock()
            .map_err(|_| self.failure(operation, "a rank panicked inside the operation"))
    }

    /// Fails if a rank has left the group.
    fn check_group(&self, operation: &'static str, round: &Round) -> Result<()> {
        match round.left {
            Some(rank) => Err(self.failure(operation, format!("rank {rank} left the group"))),
            None => Ok(()),
        }
    }

    /// Waits for the condition variable.
    fn wait<'a>(
        &self,
        operation: &'static str,
        guard: MutexGuard<'a, Round>,
    ) -> Result<MutexGuard<'a, Round>> {
        self.shared
            .changed
            .wait(guard)
            .map_err(|_| self.failure(operation, "a rank panicked inside the operation"))
    }

    /// Deposits `mine` and returns every rank's deposit of this round, in rank order.
    fn exchange(&self, operation: &'static str, mine: Payload) -> Result<Arc<Vec<Payload>>> {
        let mut round = self.lock(operation)?;
        self.check_group(operation, &round)?;
        // The previous round's deposits are still being read (by ranks that deposited
        // and were woken, so it drains): wait for it.
        while round.complete.is_some() {
            round = self.wait(operation, round)?;
        }
        round.slots[self.rank] = Some(mine);
        round.arrived += 1;
        let generation = round.generation;
        if round.arrived == self.shared.world {
            let all = round
                .slots
                .iter_mut()
                .map(|s| s.take())
                .collect::<Option<Vec<_>>>();
            let all = all.ok_or_else(|| self.failure(operation, "a rank deposited twice"))?;
            round.complete = Some(Arc::new(all));
            round.readers_left = self.shared.world;
            round.arrived = 0;
            round.generation += 1;
            self.shared.changed.notify_all();
        } else {
            // A rank that left cannot deposit: the round can never complete.
            while round.generation == generation {
                self.check_group(operation, &round)?;
                round = self.wait(operation, round)?;
            }
        }
        let all = round
            .complete
            .clone()
            .ok_or_else(|| self.failure(operation, "the round's deposits are gone"))?;
        round.readers_left -= 1;
        if round.readers_left == 0 {
            round.complete = None;
            self.shared.changed.notify_all();
        }
        Ok(all)
    }

    /// The deposits of a round as `f32` buffers of one length.
    fn values<'a>(&self, operation: &'static str, all: &'a [Payload]) -> Result<Vec<&'a [f32]>> {
        let buffers: Vec<&[f32]> = all
            .iter()
            .filter_map(|p| match p {
                Payload::Values(v) => Some(v.as_slice()),
                _ => None,
            })
            .collect();
        let same =
            buffers.len() == all.len() && buffers.windows(2).all(|w| w[0].len() == w[1].len());
        if !same {
            let lengths: Vec<String> = all
                .iter()
                .map(|p| match p {
                    Payload::Values(v) => v.len().to_string(),
                    _ => "none".into(),
                })
                .collect();
            return Err(self.failure(
                operation,
                format!("the ranks passed buffers of lengths {}", lengths.join(", ")),
            ));
        }
        Ok(buffers)
    }
}

impl ThreadRank {
    /// Leaves the group: every other rank's pending and next operations fail.
    fn leave(&self) {
        // A poisoned lock means the group is broken already.
        if let Ok(mut round) = self.shared.round.lock() {
            round.left.get_or_insert(self.rank);
            self.shared.changed.notify_all();
        }
    }
}

impl Drop for ThreadRank {
    fn drop(&mut self) {
        self.leave();
    }
}

impl Collective for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.world
    }

    fn all_reduce_sum(&mut self, values: &mut [f32]) -> Result<()> {
        let all = self.exchange("all-reduce", Payload::Values(values.to_vec()))?;
        let buffers = self.values("all-reduce", &all)?;
        for (i, v) in values.iter_mut().enumerate() {
            *v = buffers.iter().fold(0.0f32, |sum, b| sum + b[i]);
        }
        Ok(())
    }

    fn broadcast(&mut self, values: &mut [f32], root: usize) -> Result<()> {
        check_root("broadcast", self.rank, root, self.shared.world)?;
        let all = self.exchange("broadcast", Payload::Values(values.to_vec()))?;
        let buffers = self.values("broadcast", &all)?;
        values.copy_from_slice(buffers[root]);
        Ok(())
    }

    fn broadcast_indices(&mut self, indices: &mut Vec<usize>, root: usize) -> Result<()> {
        check_root("broadcast", self.rank, root, self.shared.world)?;
        let mine = if self.rank == root {
            Payload::Indices(indices.clone())
        } else {
            Payload::Nothing
        };
        let all = self.exchange("broadcast", mine)?;
        match &all[root] {
            Payload::Indices(v) => {
                indices.clone_from(v);
                Ok(())
            }
            _ => Err(self.failure("broadcast", "the root passed no indices")),
        }
    }

    fn barrier(&mut self) -> Result<()> {
        self.exchange("barrier", Payload::Nothing).map(|_| ())
    }

    fn abort(&mut self, _code: i32) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::{Collective, ThreadGroup, ThreadRank};
    use crate::Error;

    /// Runs `f` on every rank of a group of `world`, one thread each; the results by rank.
    fn on_ranks<T: Send + 'static>(
        world: usize,
        f: impl Fn(ThreadRank) -> T + Send + Sync + Copy + 'static,
    ) -> Vec<T> {
        let handles: Vec<_> = ThreadGroup::ranks(world)
            .expect("group")
            .into_iter()
            .map(|rank| std::thread::spawn(move || f(rank)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    }

    /// Round after round, every rank holds the same rank-order sum, bit for bit, and the
    /// roots' buffers and indices.
    #[test]
    fn every_rank_gets_the_rank_order_sum_and_the_roots_buffers() {
        let results = on_ranks(3, |mut c| {
            let mut sums = Vec::new();
            for round in 0..200u32 {
                let r = c.rank() as f32;
                let mut v = vec![0.1 * (r + 1.0) + round as f32, 1e-8 * r, -r];
                c.all_reduce_sum(&mut v).expect("all-reduce");
                sums.push(v);
                let mut b = vec![r; 2];
                c.broadcast(&mut b, 1).expect("broadcast");
                assert_eq!(b, vec![1.0; 2]);
                let mut idx = if c.rank() == 2 {
                    vec![5, 7, round as usize]
                } else {
                    vec![]
                };
                c.broadcast_indices(&mut idx, 2).expect("indices");
                assert_eq!(idx, vec![5, 7, round as usize]);
            }
            c.barrier().expect("barrier");
            sums
        });
        for (round, sum) in results[0].iter().enumerate() {
            let want =
                (0.0f32 + (0.1 + round as f32)) + (0.2 + round as f32) + (0.3f32 + round as f32);
            assert_eq!(sum[0].to_bits(), want.to_bits(), "round {round}");
            assert_eq!(sum[2], -3.0);
        }
        assert!(
            results.iter().all(|r| r == &results[0]),
            "identical on every rank"
        );
    }

    /// Buffers of different lengths are an error on every rank, not a truncated sum.
    #[test]
    fn mismatched_buffers_are_an_error_on_every_rank() {
        let results = on_ranks(2, |mut c| {
            let mut v = vec![1.0; 2 + c.rank()];
            c.all_reduce_sum(&mut v).map_err(|e| e.to_string())
        });
        for r in results {
            let err = r.expect_err("refused");
            assert!(err.contains("lengths 2, 3"), "{err}");
        }
    }

    /// A rank that leaves the group (its thread returns early, as a killed process would
    /// stop) makes the others' next operation fail, naming it — never a hang.
    #[test]
    fn a_rank_that_leaves_fails_the_others_next_operation() {
        let results = on_ranks(3, |mut c| {
            let mut v = vec![1.0f32];
            c.all_reduce_sum(&mut v)?;
            if c.rank() == 1 {
                return Ok(v[0]);
            }
            c.all_reduce_sum(&mut v)?;
            Ok(v[0])
        });
        assert_eq!(results[1].as_ref().ok(), Some(&3.0));
        for r in [&results[0], &results[2]] {
            match r {
                Err(Error::Collective { reason, .. }) => {
                    assert!(reason.contains("rank 1 left"), "{reason}")
                }
                other => panic!("expected a collective error, got {other:?}"),
            }
        }
    }

    /// A rank that aborts (after an error of its own) fails the others' pending
    /// operation, though it has not left its thread.
    #[test]
    fn a_rank_that_aborts_fails_the_others_pending_operation() {
        let results = on_ranks(2, |mut c| {
            if c.rank() == 0 {
                c.abort(2);
                std::thread::sleep(std::time::Duration::from_millis(50));
                return true;
            }
            let mut v = vec![1.0f32];
            matches!(c.all_reduce_sum(&mut v), Err(Error::Collective { .. }))
        });
        assert!(results.iter().all(|&failed| failed));
    }

    /// A root outside the group, or an empty group, is a typed error.
    #[test]
    fn bad_roots_and_groups_are_typed_errors() {
        assert!(ThreadGroup::ranks(0).is_err());
        let mut solo = super::super::Solo;
        assert!(solo.broadcast(&mut [1.0], 1).is_err());
        let results = on_ranks(2, |mut c| c.broadcast(&mut [1.0], 2).is_err());
        assert!(results.iter().all(|&e| e));
    }
}
