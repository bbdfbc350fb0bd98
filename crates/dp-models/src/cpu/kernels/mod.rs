//! Per-sample slice kernels of the fused executor: a bounds-checked single-threaded gemm,
//! row sums and a row-wise bias,
//! im2col and its adjoint on NHWC images, split-accumulator dot products, a polynomial
//! tanh, and the runtime choice of the vector unit they are compiled for; with the
//! `openblas` feature the gemm calls the system OpenBLAS where it can express the views. The staged
//! executor's custom ops reuse the gemm, the tanh, the sum of squares and the row sums.

mod dot;
mod gemm;
mod im2col;
mod mat;
#[cfg(feature = "openblas")]
mod openblas;
mod rows;
mod simd;
mod tanh;

pub(crate) use dot::{dot, sum_of_squares, sum_of_squares_f64, upper_f32};
pub(crate) use gemm::{matmul, matmul_uninit};
pub(crate) use im2col::{copy_short, ConvGeometry, Patches};
pub(crate) use mat::Mat;
pub(crate) use rows::{add_rows, add_to_rows};
pub(crate) use simd::vectorized;
#[cfg(test)]
pub(crate) use simd::FORCE_BASELINE;
pub(crate) use tanh::{exp_nonpositive, tanh_fast};
