//! Distance GEMMs (cuBLAS, TF32 or fp32 with a split re-check) and the argmin over their blocks.

use super::*;

/// What `argmin_rows` (kmeans.cu) reads for one block of dots: `rows` rows of scores against
/// `k` centroids, for the points from `row0` on.
pub(super) struct Argmin<'a> {
    pub(super) dots: &'a CudaSlice<f32>,
    pub(super) rows: usize,
    pub(super) k: usize,
    /// |c|^2 + bias per centroid.
    pub(super) off: &'a CudaSlice<f32>,
    pub(super) bias: &'a CudaSlice<f32>,
    pub(super) use_bias: bool,
    pub(super) x: &'a CudaSlice<f32>,
    pub(super) xn: &'a CudaSlice<f32>,
    pub(super) row0: usize,
    pub(super) d: usize,
    pub(super) c: &'a CudaSlice<f32>,
    pub(super) cn: &'a CudaSlice<f32>,
    /// Error bound of approximate dots (0: exact).
    pub(super) slack: f32,
    /// For dots of split rows: the points' unscale (indexed as `xn`) and the centroids'.
    pub(super) unscale: Option<(&'a CudaSlice<f32>, &'a CudaSlice<f32>)>,
}

impl Argmin<'_> {
    /// Writes the nearest centroid and its distance of points row0.. into `assign` and `dist`
    /// (indexed from the first point).
    pub(super) fn launch(
        &self,
        dev: &Device,
        assign: &mut CudaViewMut<'_, u32>,
        dist: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        let (ri, ki, r0, di, ub) = (
            self.rows as i32,
            self.k as i32,
            self.row0 as i32,
            self.d as i32,
            self.use_bias as i32,
        );
        let (scaled, xu, cu) = match self.unscale {
            Some((xu, cu)) => (1i32, xu, cu),
            None => (0, self.xn, self.cn),
        };
        // SAFETY: dots holds rows x k floats, x and c rows of d, xn, xu, assign and dist at
        // least row0 + rows values and off, bias, cn, cu k each, as the kernel indexes them.
        ran(
            unsafe {
                dev.stream
                    .launch_builder(&dev.k.argmin_rows)
                    .arg(self.dots)
                    .arg(&ri)
                    .arg(&ki)
                    .arg(self.off)
                    .arg(self.bias)
                    .arg(&ub)
                    .arg(self.xn)
                    .arg(&r0)
                    .arg(assign)
                    .arg(dist)
                    .arg(self.x)
                    .arg(self.c)
                    .arg(self.cn)
                    .arg(&di)
                    .arg(&self.slack)
                    .arg(&scaled)
                    .arg(xu)
                    .arg(cu)
                    .launch(per_row(self.rows))
            },
            "argmin",
        )
    }
}

/// Squared norm of each of the `rows` rows of `x` (rows x d) into `out`.
pub(super) fn row_norms(
    dev: &Device,
    x: &CudaSlice<f32>,
    rows: usize,
    d: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let (ri, di) = (rows as i32, d as i32);
    // SAFETY: x holds rows x d floats and out at least rows, as the kernel reads and writes.
    ran(
        unsafe {
            dev.stream
                .launch_builder(&dev.k.row_norms)
                .arg(x)
                .arg(&ri)
                .arg(&di)
                .arg(out)
                .launch(per_row(rows))
        },
        "row norms",
    )
}

/// Twice the error bound of a TF32 dot product over `d` terms, as a fraction of |x| |c|: each
/// operand keeps 10 of fp32's 23 mantissa bits (at most 2^-10 off each, if truncated), so
/// each product is within 2^-9; the fp32 sums add at most d units of 2^-23 more.
pub(super) fn tf32_slack(d: usize) -> f32 {
    2.0 * (2f32.powi(-9) + d as f32 * 2f32.powi(-23))
}

/// Twice the error bound of a 3xFP16 dot product beyond its fp32 sums, as a fraction of
/// |x| |c|: rounding each scaled operand to fp16 leaves hi within 2^-11 of it and lo within
/// 2^-22, so hi.hi + hi.lo + lo.hi misses each product by under 3.01 x 2^-22 of |x_i| |c_i|.
/// The scale puts each row's largest value in [2^14, 2^15): pieces that fall below fp16's
/// normal range (under 2^-28 of that value, or lo parts of values under 2^-17 of it) lose at
/// most 2^-25 each, under 2^-28 |x| |c| in all for any d up to 2^20. Both stay under 2^-20.
/// The sums round as an fp32 GEMM's do.
pub(super) const SPLIT_SLACK: f32 = 2.0 / (1u32 << 20) as f32;

/// Rows split into three scaled fp16 pieces each (`split_f16` in kmeans.cu): what the 3xFP16
/// GEMMs read, in place of fp32 rows.
pub(super) struct Split {
    /// rows x 3d fp16 values (their bits): points as [hi, hi, lo], centroids as [hi, lo, hi].
    pub(super) h: CudaSlice<u16>,
    /// Per row, the power of two that undoes its scale.
    pub(super) unscale: CudaSlice<f32>,
}

impl Split {
    /// Device bytes that `new` takes for `rows` rows of `d` values.
    pub(super) fn bytes(rows: usize, d: usize) -> usize {
        rows * (3 * d * std::mem::size_of::<u16>() + std::mem::size_of::<f32>())
    }

    /// Buffers for `rows` rows of `d` values.
    pub(super) fn new(s: &Arc<CudaStream>, rows: usize, d: usize) -> Result<Split> {
        // SAFETY: `fill` writes every element before any GEMM or argmin reads them.
        unsafe {
            Ok(Split {
                h: CudaBackend::filled_later(s, rows * 3 * d)?,
                unscale: CudaBackend::filled_later(s, rows)?,
            })
        }
    }

    /// As `new`, or `None` where the device has no room (the caller then runs fp32 GEMMs).
    pub(super) fn if_room(s: &Arc<CudaStream>, rows: usize, d: usize) -> Result<Option<Split>> {
        crate::error::none_if_out_of_memory(Split::new(s, rows, d))
    }

    /// Splits the first `rows` rows of `x` (rows x d) into these buffers.
    pub(super) fn fill(
        &mut self,
        dev: &Device,
        x: &CudaSlice<f32>,
        rows: usize,
        d: usize,
        centroids: bool,
    ) -> Result<()> {
        let (ri, di, ci) = (rows as i32, d as i32, centroids as i32);
        // SAFETY: x holds rows x d floats, h rows x 3d values and unscale rows, as the kernel
        // reads and writes.
        ran(
            unsafe {
                dev.stream
                    .launch_builder(&dev.k.split_f16)
                    .arg(x)
                    .arg(&ri)
                    .arg(&di)
                    .arg(&ci)
                    .arg(&mut self.h)
                    .arg(&mut self.unscale)
                    .launch(per_row(rows))
            },
            "split to fp16",
        )
    }
}

/// The cuBLAS math mode for one stretch of GEMMs: TF32 tensor cores when asked, back to the
/// default (fp32) when dropped, so other calls on the handle stay exact.
pub(super) struct MathMode<'a>(Option<&'a Device>);

impl<'a> MathMode<'a> {
    pub(super) fn set(dev: &'a Device, tf32: bool) -> Result<MathMode<'a>> {
        if !tf32 {
            return Ok(MathMode(None));
        }
        use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode};
        // SAFETY: the handle is live for as long as `dev`, and the lock on it is held.
        unsafe { cublasSetMathMode(*dev.blas.handle(), cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH) }
            .result()
            .map_err(|e| Error::Device(format!("cuBLAS math mode: {e}")))?;
        Ok(MathMode(Some(dev)))
    }
}

impl Drop for MathMode<'_> {
    fn drop(&mut self) {
        if let Some(dev) = self.0 {
            use cudarc::cublas::sys::{cublasMath_t, cublasSetMathMode};
            // SAFETY: as in `set`.
            let _ =
                unsafe { cublasSetMathMode(*dev.blas.handle(), cublasMath_t::CUBLAS_DEFAULT_MATH) };
        }
    }
}

/// Whether the PQ kernel takes this shape: sub-vectors in registers, at most 256 codewords.
pub(super) fn pq_kernel_fits(dsub: usize, ksub: usize) -> bool {
    (1..=MAX_DSUB).contains(&dsub) && (1..=256).contains(&ksub)
}

/// Row-major `out (rows x m) = x (rows x kd) . c (m x kd)^T` through cuBLAS: in column-major
/// terms out^T = c . x^T, so c is transposed and x is not.
pub(super) fn gemm_rows_by(
    dev: &Device,
    c: &CudaSlice<f32>,
    m: usize,
    kd: usize,
    x: &cudarc::driver::CudaView<'_, f32>,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_T,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: m as i32,
        n: rows as i32,
        k: kd as i32,
        alpha: 1.0f32,
        lda: kd as i32,
        ldb: kd as i32,
        beta: 0.0f32,
        ldc: m as i32,
    };
    // SAFETY: c holds m x kd floats, x rows x kd, out at least rows x m.
    unsafe { dev.blas.gemm(cfg, c, x, out) }
        .map_err(|e| Error::Device(format!("cuBLAS sgemm: {e}")))
}

/// As `gemm_rows_by` for split rows (3d fp16 values each): the pieces multiply on tensor
/// cores with fp32 sums, into dots still scaled by each row's and centroid's power of two.
pub(super) fn gemm_split_rows_by(
    dev: &Device,
    c: &Split,
    m: usize,
    kd: usize,
    x: &cudarc::driver::CudaView<'_, u16>,
    rows: usize,
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cudaDataType_t};
    let s = &dev.stream;
    let (a, _ra) = c.h.device_ptr(s);
    let (b, _rb) = x.device_ptr(s);
    let (o, _ro) = out.device_ptr_mut(s);
    let (alpha, beta) = (1f32, 0f32);
    // SAFETY: c holds m x kd values, x rows x kd, out at least rows x m floats; the handle
    // runs on this stream, where the pointers' uses are recorded.
    unsafe {
        cudarc::cublas::result::gemm_ex(
            *dev.blas.handle(),
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
            m as i32,
            rows as i32,
            kd as i32,
            (&alpha as *const f32).cast(),
            a as *const _,
            cudaDataType_t::CUDA_R_16F,
            kd as i32,
            b as *const _,
            cudaDataType_t::CUDA_R_16F,
            kd as i32,
            (&beta as *const f32).cast(),
            o as *mut _,
            cudaDataType_t::CUDA_R_32F,
            m as i32,
            cublasComputeType_t::CUBLAS_COMPUTE_32F,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| Error::Device(format!("cuBLAS fp16 GEMM: {e}")))
}

/// Dots of rows `row0..row0 + rows` of `x` (n x d) with the `k` centroids `c`, into `out`:
/// from the fp16 pieces where both sides are split (`split`: the rows', the centroids'; the
/// dots then carry their scales, which `Argmin::unscale` undoes), else one fp32 GEMM.
#[allow(clippy::too_many_arguments)]
pub(super) fn dots_rows(
    dev: &Device,
    x: &CudaSlice<f32>,
    c: &CudaSlice<f32>,
    split: Option<(&Split, &Split)>,
    k: usize,
    d: usize,
    (row0, rows): (usize, usize),
    out: &mut CudaSlice<f32>,
) -> Result<()> {
    match split {
        Some((xs, cs)) => {
            let v = xs.h.slice(row0 * 3 * d..(row0 + rows) * 3 * d);
            gemm_split_rows_by(dev, cs, k, 3 * d, &v, rows, out)
        }
        None => {
            let v = x.slice(row0 * d..(row0 + rows) * d);
            gemm_rows_by(dev, c, k, d, &v, rows, out)
        }
    }
}
