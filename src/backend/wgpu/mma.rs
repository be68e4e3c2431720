//! Nearest-anchor assignment on cooperative matrices (mma.wgsl) where the adapter has them
//! with fp16 inputs and fp32 sums (tensor cores): points and anchors go to fp16 once, the
//! products run there, and the rows whose winner the fp16 products cannot prove go through
//! the fp32 kernel again. The answers are the fp32 kernel's.

use super::{fold, Assign, Buf, Params, Rec, WgpuBackend};
use crate::backend::{Cooperative, ShaderChecks};
use crate::error::Result;

/// Anchors per chunk of `assign_mma` (`CH` in mma.wgsl).
const CHUNK: usize = 64;

/// The kernels' workgroup size (mma.wgsl's fixed 256).
const THREADS: usize = 256;

/// Workgroup memory `assign_mma` takes with subgroups of `sg` threads (16 rows each).
fn workgroup_bytes(sg: u32) -> u32 {
    let rows = 16 * THREADS / sg as usize;
    // The dots, the columns' values, the 16-column slices (24 halves a row), the winners.
    (rows * CHUNK * 4 + CHUNK * 16 + (rows + CHUNK) * 24 * 2 + rows * 4) as u32
}

/// The built kernels of mma.wgsl and the rows per workgroup of `assign_mma`.
pub(super) struct Mma {
    halves: wgpu::ComputePipeline,
    assign: wgpu::ComputePipeline,
    rows: usize,
    emulated: bool,
}

/// Rows in fp16 on the device: the halves (rows padded to whole workgroups, dimension to
/// `dp`) and per row (unscale, rounding error, norm, 0).
pub(super) struct Halves {
    h: Buf,
    s: Buf,
    dp: usize,
}

/// What the kernels need from the adapter, where it has it.
pub(super) struct Support {
    pub features: wgpu::Features,
    /// The subgroup size that fixes the products' tile (16 rows per subgroup).
    sg: u32,
    /// Products summed by every thread instead of on cooperative matrices (a test hook).
    emulate: bool,
}

/// The features the kernels need, and the subgroup size that fixes their tile, where the
/// adapter has them and `WgpuOptions::cooperative` asks for them: cooperative 16 x 16 x 16 matrices
/// with fp16 inputs and fp32 sums, one subgroup size of 32 or 64, and the workgroup memory.
/// Else why not. (Opt-in until a GPU run shows this version exact and faster than the fp32
/// kernel: notes/perf-wgpu.md, version 24.) `Cooperative::Emulate` builds the kernel with
/// its products summed by every thread (`EMULATED`) where the adapter has fp16 and
/// subgroups, so that everything around the products runs on any such adapter
/// (tests/wgpu.rs, on lavapipe in CI).
pub(super) fn supported(
    adapter: &wgpu::Adapter,
    asked: Cooperative,
) -> std::result::Result<Support, String> {
    use wgpu::{CooperativeScalarType as S, Features as F};
    let emulate = match asked {
        Cooperative::Off => return Err("not asked for (WgpuOptions::cooperative)".into()),
        Cooperative::On => false,
        #[cfg(feature = "test-hooks")]
        Cooperative::Emulate => true,
    };
    let mut need = F::SHADER_F16 | F::SUBGROUP;
    if !emulate {
        need |= F::EXPERIMENTAL_COOPERATIVE_MATRIX;
    }
    let missing = need - adapter.features();
    if !missing.is_empty() {
        return Err(format!("the adapter lacks {missing:?}"));
    }
    let info = adapter.get_info();
    let sg = match emulate {
        // Any subgroups do: the emulated products do not use them.
        true => 64,
        false => {
            let shapes = adapter.cooperative_matrix_properties();
            if !shapes.iter().any(|p| {
                (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                    && p.ab_type == S::F16
                    && p.cr_type == S::F32
            }) {
                return Err(format!(
                    "no 16x16x16 fp16 x fp16 + fp32 shape among {shapes:?}"
                ));
            }
            let sg = info.subgroup_min_size;
            if sg != info.subgroup_max_size || !(sg == 32 || sg == 64) {
                return Err(format!(
                    "subgroups of {sg} to {} threads, not one size of 32 or 64",
                    info.subgroup_max_size
                ));
            }
            sg
        }
    };
    let bytes = workgroup_bytes(sg);
    if adapter.limits().max_compute_workgroup_storage_size < bytes {
        return Err(format!("under {bytes} bytes of workgroup memory"));
    }
    Ok(Support {
        features: need,
        sg,
        emulate,
    })
}

/// The products without cooperative matrices, for the test hook (`Cooperative::Emulate`).
const EMULATED: &str = include_str!("../../../kernels/wgpu/mma_emulated.wgsl.part");

/// mma.wgsl, with its products emulated where `emulate`.
fn source(emulate: bool) -> String {
    let src = super::kernel("mma.wgsl");
    if !emulate {
        return src.to_string();
    }
    let (begin, end) = ("// products: begin", "// products: end");
    let a = src.find(begin).expect("marked");
    let b = src.find(end).expect("marked");
    let s = format!("{}{EMULATED}{}", &src[..a], &src[b + end.len()..]);
    s.replace("enable wgpu_cooperative_matrix;\n", "")
}

impl Mma {
    pub fn new(
        device: &wgpu::Device,
        limits: &wgpu::Limits,
        checks: ShaderChecks,
        s: &Support,
    ) -> Result<Mma> {
        let src = source(s.emulate);
        let m = super::module_of(device, limits, checks, "mma.wgsl", &src, &[("SG", s.sg)])?;
        Ok(Mma {
            halves: super::pipeline(device, &m, "halves")?,
            assign: super::pipeline(device, &m, "assign_mma")?,
            rows: 16 * THREADS / s.sg as usize,
            emulated: s.emulate,
        })
    }

    /// Whether the products are the test hook's (`Cooperative::Emulate`).
    pub fn emulated(&self) -> bool {
        self.emulated
    }
}

impl Halves {
    /// Buffers for `rows` rows of `d` values, padded to whole workgroups of `mma`.
    pub fn new(b: &WgpuBackend, mma: &Mma, rows: usize, d: usize, what: &str) -> Result<Halves> {
        let dp = d.next_multiple_of(16);
        let padded = rows.next_multiple_of(mma.rows.max(CHUNK));
        Ok(Halves {
            h: b.zeros(padded * dp * 2, what)?,
            s: b.zeros(rows * 16, what)?,
            dp,
        })
    }
}

impl WgpuBackend {
    /// Rows per block of `d`-value points, at most `cap`, whose widest per-row buffer holds
    /// `width` floats: within one binding, and with cooperative matrices also their halves
    /// (2 bytes per value of d rounded up to 16) and whole workgroups of `assign_mma`.
    pub(super) fn block_rows(&self, d: usize, width: usize, cap: usize) -> usize {
        let Some(m) = self.mma() else {
            return self.rows_per_block(width.max(d)).min(cap);
        };
        let per = self
            .rows_per_block(width.max(d).max(d.next_multiple_of(16) / 2))
            .min(cap);
        (per / m.rows).max(1) * m.rows
    }

    /// Records the fp16 halves of `rows` rows of `x` (`d` values each) into `into`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn halves(
        &self,
        enc: &mut Rec,
        keep: Option<&super::Binds>,
        mma: &Mma,
        x: &Buf,
        rows: usize,
        d: usize,
        into: &Halves,
    ) {
        let (gx, gy) = fold(rows.div_ceil(self.wg as usize));
        let p = Params::new(&[rows as u32, 0, d as u32, 0, 0, gx, into.dp as u32]);
        let bufs = [(13, x), (14, &into.h), (15, &into.s)];
        self.dispatch_kept(enc, keep, &mma.halves, p, &bufs, (gx, gy, 1));
    }

    /// Records `assign_mma` over the points' and anchors' halves, then the fp32 assignment
    /// of the rows it left (listed in `listed`: a count and up to `a.rows` rows).
    pub(super) fn assign_mma(
        &self,
        enc: &mut Rec,
        mma: &Mma,
        a: &Assign<'_>,
        (xh, ch, listed): (&Halves, &Halves, &Buf),
        trace: &mut super::Trace,
    ) {
        enc.enc().clear_buffer(listed, 0, Some(4));
        let (gx, gy) = fold(a.rows.div_ceil(mma.rows));
        let p = a.params(gx, xh.dp as u32);
        let bufs = [
            (1, a.x),
            (2, a.c),
            (3, &xh.h),
            (4, &ch.h),
            (5, &xh.s),
            (6, &ch.s),
            (7, a.off),
            (8, a.bias.unwrap_or(a.off)),
            (9, a.norms),
            (10, a.assigned),
            (11, a.dist),
            (12, listed),
        ];
        self.dispatch_kept(enc, a.keep, &mma.assign, p, &bufs, (gx, gy, 1));
        trace.mark(self, enc, "assign fp16");
        if trace.recording() {
            let left = self
                .read(std::mem::replace(enc, self.encoder()), &[(listed, 4)])
                .map(|r| u32::from_le_bytes(r[0][..4].try_into().expect("4 bytes")));
            trace.note(|| format!("rows left to fp32: {left:?} of {}", a.rows));
        }
        self.assign_exact(enc, a, Some(listed));
        trace.mark(self, enc, "assign fp32 rest");
    }
}
