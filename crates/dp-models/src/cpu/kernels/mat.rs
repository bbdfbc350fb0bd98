//! A strided row-major view of a slice of f32: what the gemm and its OpenBLAS path take.

/// A row-major matrix view: `data[row * row_stride + col * col_stride]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a> Mat<'a> {
    /// Row-major rows `stride` apart.
    pub(crate) fn rows(data: &'a [f32], stride: usize) -> Self {
        Mat {
            data,
            row_stride: stride,
            col_stride: 1,
        }
    }

    /// The transpose of [`Mat::rows`]`(data, stride)`.
    pub(crate) fn transposed(data: &'a [f32], stride: usize) -> Self {
        Mat {
            data,
            row_stride: 1,
            col_stride: stride,
        }
    }
}
