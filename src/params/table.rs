//! The one table of training parameters: id, name, bounds, default and doc, with how each is
//! read and written. The C ABI's `vlcc_param` numbers, `set_param`/`get_param`,
//! `vlcc_param_bounds`, the command's flags and the bindings' constants all follow it
//! (tests/drift.rs fails on any difference).

use super::{
    ErrorCode, Init, Metric, Precision, Rotation, SearchParams, TrainParams, MAX_BYTES_PER_VECTOR,
};
use crate::error::{num, Error, Result};

/// 2^53: every whole number up to it is exact in a double.
const BIG: f64 = 9_007_199_254_740_992.0;
/// The largest finite f32, as the bound of 32-bit parameters.
const F32_MAX: f64 = f32::MAX as f64;

/// One training parameter.
#[derive(Clone, Copy, Debug)]
pub struct ParamInfo {
    /// Its number in the C ABI (`vlcc_param`); never reused.
    pub id: u32,
    /// Its name: `VLCC_PARAM_<NAME>` in C, `--<name with dashes>` on the command line.
    pub name: &'static str,
    /// Whole numbers only.
    pub whole: bool,
    /// The smallest and largest values accepted (both included; other checks may refuse
    /// values between them, such as bits = 5, or anchors above the training set's size).
    pub min: f64,
    pub max: f64,
    pub default: f64,
    pub doc: &'static str,
    get: fn(&TrainParams) -> f64,
    /// Stores a value already within the bounds.
    put: fn(&mut TrainParams, f64),
}

macro_rules! param {
    ($id:expr, $name:expr, $whole:expr, $min:expr, $max:expr, $doc:expr,
     |$p:ident| $field:expr, |$q:ident, $v:ident| $put:expr) => {
        ParamInfo {
            id: $id,
            name: $name,
            whole: $whole,
            min: $min,
            max: $max,
            default: 0.0,
            doc: $doc,
            get: |$p| $field,
            put: |$q, $v| $put,
        }
    };
}

/// Every training parameter, by id. The defaults are filled from `TrainParams::default()`.
const TABLE: &[ParamInfo] = &[
    param!(1, "anchors", true, 1.0, u32::MAX as f64,
        "Anchors (inverted lists); at most the number of training vectors.",
        |p| p.anchor.anchors as f64, |p, v| p.anchor.anchors = v as usize),
    param!(2, "bytes_per_vector", true, 1.0, MAX_BYTES_PER_VECTOR as f64,
        "Bytes of residual code per vector.",
        |p| p.bytes_per_vector as f64, |p, v| p.bytes_per_vector = v as usize),
    param!(3, "bits", true, 4.0, 8.0, "Bits per sub-code: 8 or 4.",
        |p| p.bits as f64, |p, v| p.bits = v as u32),
    param!(4, "metric", true, 0.0, 2.0, "A `vlcc_metric` value: 0 L2, 1 inner product, 2 cosine.",
        |p| p.metric.code() as f64, |p, v| p.metric = Metric::from_code(v as u32).expect("bounded")),
    param!(5, "rotation", true, 0.0, 2.0,
        "Residual rotation: 0 none, 1 random orthogonal, 2 learned (OPQ).",
        |p| p.rotation.code() as f64,
        |p, v| p.rotation = Rotation::from_code(v as u32).expect("bounded")),
    param!(6, "max_iters", true, 1.0, BIG, "Anchor training iterations.",
        |p| p.anchor.max_iters as f64, |p, v| p.anchor.max_iters = v as usize),
    param!(7, "tol", false, 0.0, f64::MAX,
        "Stop when the relative energy change is below this.",
        |p| p.anchor.tol, |p, v| p.anchor.tol = v),
    param!(8, "initial_temp", false, 0.0, F32_MAX, "Starting temperature (0 = no annealing).",
        |p| p.anchor.initial_temp as f64, |p, v| p.anchor.initial_temp = v as f32),
    param!(9, "cooling_rate", false, f32::MIN_POSITIVE as f64, 1.0,
        "Temperature multiplier per iteration, in (0, 1].",
        |p| p.anchor.cooling_rate as f64, |p, v| p.anchor.cooling_rate = v as f32),
    param!(10, "trim", false, 0.0, 0.499_999_97,
        "Trimmed fraction of each anchor's farthest points at the starting temperature, in [0, 0.5).",
        |p| p.anchor.trim as f64, |p, v| p.anchor.trim = v as f32),
    param!(11, "balance", false, 0.0, F32_MAX, "Load-balancing strength at the starting temperature.",
        |p| p.anchor.balance as f64, |p, v| p.anchor.balance = v as f32),
    param!(12, "maintenance_interval", true, 0.0, BIG,
        "Merge/split/re-seat every this many iterations (0 = never).",
        |p| p.anchor.maintenance_interval as f64,
        |p, v| p.anchor.maintenance_interval = v as usize),
    param!(13, "merge_threshold", false, 0.0, F32_MAX,
        "Merge anchors closer than this times their radius.",
        |p| p.anchor.merge_threshold as f64, |p, v| p.anchor.merge_threshold = v as f32),
    param!(14, "split_factor", false, 1.000_000_1, F32_MAX,
        "Split anchors holding more than this times the mean load (> 1).",
        |p| p.anchor.split_factor as f64, |p, v| p.anchor.split_factor = v as f32),
    param!(15, "max_points_per_anchor", true, 0.0, BIG,
        "Training vectors used per anchor (0 = all).",
        |p| p.anchor.max_points_per_anchor as f64,
        |p, v| p.anchor.max_points_per_anchor = v as usize),
    param!(16, "seed", true, 0.0, BIG, "Random seed.",
        |p| p.anchor.seed as f64, |p, v| p.anchor.seed = v as u64),
    param!(17, "pq_iters", true, 1.0, BIG, "Lloyd iterations per PQ sub-codebook.",
        |p| p.pq_iters as f64, |p, v| p.pq_iters = v as usize),
    param!(18, "pq_train_points", true, 0.0, BIG,
        "Training vectors for the PQ sub-codebooks (0 = all).",
        |p| p.pq_train_points as f64, |p, v| p.pq_train_points = v as usize),
    param!(19, "opq_iters", true, 0.0, BIG,
        "Alternations of the learned rotation after its eigenvalue-allocation start (0 = that start alone).",
        |p| p.opq_iters as f64, |p, v| p.opq_iters = v as usize),
    param!(20, "init", true, 0.0, 1.0, "Anchor initialisation: 0 k-means++, 1 a seeded sample.",
        |p| (p.anchor.init == Init::Sample) as u32 as f64,
        |p, v| p.anchor.init = [Init::KMeansPlusPlus, Init::Sample][v as usize]),
    param!(21, "opq_train_points", true, 0.0, BIG,
        "Training vectors the learned rotation is fitted on (0 = all of the PQ sample).",
        |p| p.opq_train_points as f64, |p, v| p.opq_train_points = v as usize),
    param!(22, "precision", true, 0.0, 1.0,
        "Anchor-assignment distances on GPU backends: 0 fp32, 1 TF32 tensor cores (CUDA only).",
        |p| (p.anchor.precision == Precision::Tf32) as u32 as f64,
        |p, v| p.anchor.precision = [Precision::Exact, Precision::Tf32][v as usize]),
    param!(23, "error_code", true, 0.0, 2.0,
        "Last sub-code of each code names the squared error of the rest, added to L2 distances: 0 auto (L2, at least 8 dimensions per byte of code), 1 off, 2 on (L2 only).",
        |p| p.error_code.code() as f64,
        |p, v| p.error_code = ErrorCode::from_code(v as u32).expect("bounded")),
];

/// Every training parameter, defaults included, in id order.
pub fn params() -> impl Iterator<Item = ParamInfo> {
    let defaults = TrainParams::default();
    TABLE.iter().map(move |p| ParamInfo {
        default: (p.get)(&defaults),
        ..*p
    })
}

/// The parameter with this id.
pub fn param(id: u32) -> Result<ParamInfo> {
    params()
        .find(|p| p.id == id)
        .ok_or_else(|| Error::InvalidArgument(format!("param = {id}: not a parameter id")))
}

impl TrainParams {
    /// Parameter `id`'s value.
    pub fn get(&self, id: u32) -> Result<f64> {
        Ok((param(id)?.get)(self))
    }

    /// Sets parameter `id` to `value` if it is within its bounds (and whole where it must be),
    /// then checks the whole set (`validate`): on error nothing changes.
    pub fn set(&mut self, id: u32, value: f64) -> Result<()> {
        let p = param(id)?;
        in_bounds(p.name, value, p.min, p.max, p.whole)?;
        let mut next = self.clone();
        (p.put)(&mut next, value);
        next.validate()?;
        *self = next;
        Ok(())
    }
}

/// A search parameter, as the C ABI's `vlcc_search_param` numbers it: a whole number from
/// `min` up to `BIG`.
struct SearchParamInfo {
    id: u32,
    name: &'static str,
    min: f64,
    get: fn(&SearchParams) -> usize,
    put: fn(&mut SearchParams, usize),
}

#[rustfmt::skip]
const SEARCH: &[SearchParamInfo] = &[
    SearchParamInfo { id: 1, name: "k", min: 1.0, get: |p| p.k, put: |p, v| p.k = v },
    SearchParamInfo { id: 2, name: "nprobe", min: 1.0, get: |p| p.nprobe, put: |p, v| p.nprobe = v },
    SearchParamInfo { id: 3, name: "rerank", min: 0.0, get: |p| p.rerank, put: |p, v| p.rerank = v },
];

fn search_param(id: u32) -> Result<&'static SearchParamInfo> {
    SEARCH
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| Error::InvalidArgument(format!("param = {id}: not a search parameter id")))
}

impl SearchParams {
    /// Search parameter `id`'s value.
    pub fn get(&self, id: u32) -> Result<f64> {
        Ok((search_param(id)?.get)(self) as f64)
    }

    /// Sets search parameter `id` to `value`, a whole number within its bounds. Whether the
    /// set holds together (rerank 0 or >= k) is checked by the search that uses it.
    pub fn set(&mut self, id: u32, value: f64) -> Result<()> {
        let SearchParamInfo { name, min, put, .. } = search_param(id)?;
        in_bounds(name, value, *min, BIG, true)?;
        put(self, value as usize);
        Ok(())
    }
}

/// `InvalidArgument` naming the parameter and its range unless `v` is within `[min, max]` (and
/// whole, where it must be).
fn in_bounds(name: &str, v: f64, min: f64, max: f64, whole: bool) -> Result<()> {
    if v >= min && v <= max && (!whole || v.fract() == 0.0) {
        return Ok(());
    }
    let what = if whole { "a whole number" } else { "a number" };
    Err(Error::InvalidArgument(format!(
        "{name} = {}: must be {what} in [{}, {}]",
        num(v),
        num(min),
        num(max)
    )))
}
