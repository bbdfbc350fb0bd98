//! The one source of randomness: ChaCha20, OS-seeded by default.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, Exp1, StandardNormal};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Elements per independently forked noise stream in bulk operations.
pub const PARALLEL_CHUNK: usize = 1 << 16;

/// A cryptographically secure noise source (ChaCha20, `rand_chacha`).
///
/// * [`NoiseSource::os_seeded`] draws a 256-bit key from the operating system: use it for
///   every private release.
/// * [`NoiseSource::seeded`] derives the key from a `u64`: runs are bit-for-bit
///   reproducible, and **anyone who knows or guesses the seed can subtract the noise.
///   Never use a seeded source in production.**
///
/// [`state`](Self::state) / [`restore`](Self::restore) save and resume the exact stream
/// position for checkpoints; a saved state contains the key, so protect checkpoint files
/// as you would the training data.
#[derive(Clone, Debug)]
pub struct NoiseSource {
    rng: ChaCha20Rng,
    reproducible: bool,
}

/// The resumable state of a [`NoiseSource`] (includes its secret key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoiseState {
    /// The ChaCha20 key.
    pub key: [u8; 32],
    /// The ChaCha20 stream id.
    pub stream: u64,
    /// The position in the stream, in 32-bit words.
    pub word_pos: u128,
    /// Whether the key came from [`NoiseSource::seeded`].
    pub reproducible: bool,
}

impl NoiseSource {
    /// A source keyed by the operating system's random number generator.
    pub fn os_seeded() -> Result<Self> {
        let mut key = [0u8; 32];
        rand::rngs::OsRng
            .try_fill_bytes(&mut key)
            .map_err(|e| Error::Entropy(e.to_string()))?;
        Ok(NoiseSource {
            rng: ChaCha20Rng::from_seed(key),
            reproducible: false,
        })
    }

    /// A reproducible source keyed by `seed`. **Not for production**: the noise is
    /// predictable from the seed.
    pub fn seeded(seed: u64) -> Self {
        NoiseSource {
            rng: ChaCha20Rng::seed_from_u64(seed),
            reproducible: true,
        }
    }

    /// Whether this source was built from a `u64` seed (and is therefore predictable).
    pub fn is_reproducible(&self) -> bool {
        self.reproducible
    }

    /// The state to resume from, for checkpoints.
    pub fn state(&self) -> NoiseState {
        NoiseState {
            key: self.rng.get_seed(),
            stream: self.rng.get_stream(),
            word_pos: self.rng.get_word_pos(),
            reproducible: self.reproducible,
        }
    }

    /// Resumes exactly where [`state`](Self::state) was taken.
    pub fn restore(state: &NoiseState) -> Self {
        let mut rng = ChaCha20Rng::from_seed(state.key);
        rng.set_stream(state.stream);
        rng.set_word_pos(state.word_pos);
        NoiseSource {
            rng,
            reproducible: state.reproducible,
        }
    }

    /// A fresh, independent source for a parallel worker, keyed from this one.
    pub fn fork(&mut self) -> Self {
        let mut key = [0u8; 32];
        self.rng.fill_bytes(&mut key);
        NoiseSource {
            rng: ChaCha20Rng::from_seed(key),
            reproducible: self.reproducible,
        }
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform index in `0..n`, without modulo bias (values of the 64-bit draw below
    /// `2^64 mod n` are redrawn, so every index has exactly the same number of preimages).
    ///
    /// # Panics
    /// If `n` is 0 (callers draw from non-empty sets).
    pub fn index_below(&mut self, n: usize) -> usize {
        assert!(n > 0, "index_below(0)");
        let n = n as u64;
        let threshold = n.wrapping_neg() % n;
        loop {
            let x = self.rng.next_u64();
            if x >= threshold {
                return (x % n) as usize;
            }
        }
    }

    /// A standard normal draw (ziggurat, `rand_distr`).
    pub fn standard_normal(&mut self) -> f64 {
        StandardNormal.sample(&mut self.rng)
    }

    /// An Exp(1) draw (ziggurat).
    pub fn standard_exponential(&mut self) -> f64 {
        Exp1.sample(&mut self.rng)
    }

    /// A standard Gumbel draw, `−ln E` with `E ~ Exp(1)`.
    pub fn standard_gumbel(&mut self) -> f64 {
        -self.standard_exponential().ln()
    }

    /// A Laplace(0, `scale`) draw: a random sign times Exp(1)·scale.
    pub fn laplace(&mut self, scale: f64) -> f64 {
        let magnitude = scale * self.standard_exponential();
        if self.rng.next_u32() & 1 == 1 {
            magnitude
        } else {
            -magnitude
        }
    }

    /// Runs `work` over `data` in fixed chunks of [`PARALLEL_CHUNK`] elements, each chunk
    /// with its own source forked from this one in chunk order, spread over the available
    /// cores. The result depends only on the seed and the data length, never on the
    /// number of threads.
    pub fn for_each_chunk<T: Send>(
        &mut self,
        data: &mut [T],
        work: impl Fn(&mut NoiseSource, usize, &mut [T]) + Sync,
    ) {
        if data.len() <= PARALLEL_CHUNK {
            work(self, 0, data);
            return;
        }
        let mut jobs: Vec<(usize, NoiseSource, &mut [T])> = data
            .chunks_mut(PARALLEL_CHUNK)
            .enumerate()
            .map(|(i, chunk)| (i * PARALLEL_CHUNK, self.fork(), chunk))
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(jobs.len());
        let per_thread = jobs.len().div_ceil(threads);
        let work = &work;
        std::thread::scope(|scope| {
            for group in jobs.chunks_mut(per_thread) {
                scope.spawn(move || {
                    for (offset, source, chunk) in group.iter_mut() {
                        work(source, *offset, chunk);
                    }
                });
            }
        });
    }

    /// Adds `N(0, std²)` to every element of `buffer`, in parallel chunks (the DP-SGD
    /// path: fast float noise, not hardened against floating-point attacks).
    pub fn add_gaussian_f32(&mut self, buffer: &mut [f32], std: f64) {
        self.for_each_chunk(buffer, |source, _, chunk| {
            for x in chunk.iter_mut() {
                let z: f64 = StandardNormal.sample(&mut source.rng);
                *x += (std * z) as f32;
            }
        });
    }

    /// Adds `N(0, std²)` to every element of `buffer`, in parallel chunks.
    pub fn add_gaussian_f64(&mut self, buffer: &mut [f64], std: f64) {
        self.for_each_chunk(buffer, |source, _, chunk| {
            for x in chunk.iter_mut() {
                let z: f64 = StandardNormal.sample(&mut source.rng);
                *x += std * z;
            }
        });
    }

    /// Fills `buffer` with standard normal draws.
    pub fn fill_standard_normal_f32(&mut self, buffer: &mut [f32]) {
        for x in buffer.iter_mut() {
            let z: f64 = StandardNormal.sample(&mut self.rng);
            *x = z as f32;
        }
    }

    /// A uniform integer in `[0, bound)`, exactly (rejection sampling; `bound > 0`).
    pub(crate) fn uniform_below(&mut self, bound: u128) -> u128 {
        debug_assert!(bound > 0);
        if bound == 1 {
            return 0;
        }
        let bits = 128 - (bound - 1).leading_zeros();
        loop {
            let raw = (u128::from(self.rng.next_u64()) << 64) | u128::from(self.rng.next_u64());
            let candidate = if bits == 128 {
                raw
            } else {
                raw & ((1u128 << bits) - 1)
            };
            if candidate < bound {
                return candidate;
            }
        }
    }

    /// A fair coin.
    pub(crate) fn coin(&mut self) -> bool {
        self.rng.next_u32() & 1 == 1
    }
}

impl RngCore for NoiseSource {
    fn next_u32(&mut self) -> u32 {
        self.rng.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.rng.fill_bytes(dest)
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> std::result::Result<(), rand::Error> {
        self.rng.try_fill_bytes(dest)
    }
}
