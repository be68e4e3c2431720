//! Parameters: every one has a default and is validated before any work starts.

mod refine;
mod table;

pub use refine::Refine;
pub use table::{param, params, ParamInfo};

use crate::error::{invalid, num, Result};

/// How vectors are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Squared Euclidean distance (smaller is nearer).
    L2,
    /// Inner product (larger is nearer; reported distances are `-ip`).
    #[serde(rename = "ip")]
    InnerProduct,
    /// Cosine similarity: vectors are L2-normalised on the way in, then inner product.
    Cosine,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::InnerProduct => "ip",
            Metric::Cosine => "cosine",
        }
    }
    pub(crate) fn code(self) -> u32 {
        match self {
            Metric::L2 => 0,
            Metric::InnerProduct => 1,
            Metric::Cosine => 2,
        }
    }
    pub(crate) fn from_code(c: u32) -> Option<Metric> {
        [Metric::L2, Metric::InnerProduct, Metric::Cosine]
            .get(c as usize)
            .copied()
    }
}

impl std::str::FromStr for Metric {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "euclidean" => Ok(Metric::L2),
            "ip" | "inner_product" | "dot" => Ok(Metric::InnerProduct),
            "cosine" | "angular" => Ok(Metric::Cosine),
            _ => invalid!("unknown metric {s:?} (expected l2, ip or cosine)"),
        }
    }
}

/// Rotation applied to residuals before product quantization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rotation {
    /// No rotation.
    None,
    /// A seeded random orthogonal matrix: spreads variance evenly across sub-spaces.
    Random,
    /// Learned (OPQ): alternates PQ training with an orthogonal Procrustes fit.
    Learned,
}

impl Rotation {
    pub(crate) fn code(self) -> u32 {
        match self {
            Rotation::None => 0,
            Rotation::Random => 1,
            Rotation::Learned => 2,
        }
    }
    pub(crate) fn from_code(c: u32) -> Option<Rotation> {
        [Rotation::None, Rotation::Random, Rotation::Learned]
            .get(c as usize)
            .copied()
    }
}

impl std::fmt::Display for Rotation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Rotation::None => "none",
            Rotation::Random => "random",
            Rotation::Learned => "learned",
        })
    }
}

impl std::str::FromStr for Rotation {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Rotation::None),
            "random" => Ok(Rotation::Random),
            "learned" | "opq" => Ok(Rotation::Learned),
            _ => invalid!("unknown rotation {s:?} (expected none, random or learned)"),
        }
    }
}

/// How a GPU backend computes the anchor-assignment distances. The CPU always uses fp32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// fp32-exact: the same assignments as the CPU up to the last bit of rounding. CUDA runs
    /// the GEMMs on tensor cores with each operand split into two TF32 pieces (within 2^-20 of
    /// each fp32 product, fp32 sums) and scores again in fp32 every anchor that error could
    /// have let through; other backends use fp32 products.
    Exact,
    /// TF32 tensor-core products (10-bit mantissas) with fp32 sums, then every anchor the
    /// TF32 error bound cannot rule out scored again in fp32: fp32's assignments and
    /// distances, faster where few anchors are nearly equidistant from a point (CUDA only).
    /// Training skips the re-check while the balancing bias is on (it moves assignments by
    /// far more than TF32's rounding), so the cold iterations and the result are fp32's.
    Tf32,
}

/// Whether a code spends its last byte on the squared error of the rest (`ErrorCode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorCode {
    /// On where it pays (see `TrainParams::error_code_for`): L2, at least 8 dimensions per
    /// byte of code.
    Auto,
    Off,
    /// The last sub-code of every code (a byte, or a nibble at 4 bits) is the error level
    /// (L2 only).
    On,
}

impl ErrorCode {
    pub(crate) fn code(self) -> u32 {
        match self {
            ErrorCode::Auto => 0,
            ErrorCode::Off => 1,
            ErrorCode::On => 2,
        }
    }
    pub(crate) fn from_code(c: u32) -> Option<ErrorCode> {
        [ErrorCode::Auto, ErrorCode::Off, ErrorCode::On]
            .get(c as usize)
            .copied()
    }
}

impl std::str::FromStr for ErrorCode {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ErrorCode::Auto),
            "off" | "no" => Ok(ErrorCode::Off),
            "on" | "yes" => Ok(ErrorCode::On),
            _ => invalid!("unknown error code setting {s:?} (expected auto, off or on)"),
        }
    }
}

/// Anchor initialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// k-means++ (D^2 sampling) on a sample of the training set.
    KMeansPlusPlus,
    /// A seeded uniform sample of the training points.
    Sample,
}

impl std::str::FromStr for Init {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "kmeans++" | "kmeanspp" => Ok(Init::KMeansPlusPlus),
            "sample" | "random" => Ok(Init::Sample),
            _ => invalid!("unknown init {s:?} (expected kmeans++ or sample)"),
        }
    }
}

/// The annealed robust k-means loop (docs/training.md, "The loop").
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AnchorParams {
    /// Number of anchors m (inverted lists). Must be <= the number of training points.
    pub anchors: usize,
    /// Iteration cap.
    pub max_iters: usize,
    /// Stop when the relative energy change between iterations is below this.
    pub tol: f64,
    /// Starting temperature T0 (>= 0). 0 turns the annealing off (plain robust Lloyd).
    pub initial_temp: f32,
    /// T is multiplied by this every iteration, in (0, 1].
    pub cooling_rate: f32,
    /// Fraction of each anchor's farthest points dropped from its mean at T = T0, in [0, 0.5).
    /// The fraction cools with T, so the final iterations use the plain mean.
    pub trim: f32,
    /// Strength of the load-balancing penalty at T = T0 (>= 0): an anchor whose smoothed load
    /// is `c` points costs `balance * T/T0 * energy * min(c / mean - 1, 1)` more to join.
    pub balance: f32,
    /// Merge/split every this many iterations (0 = never).
    pub maintenance_interval: usize,
    /// Merge two anchors closer than this times their spread (RMS radius), >= 0.
    pub merge_threshold: f32,
    /// Split anchors holding more than this times the mean load, > 1.
    pub split_factor: f32,
    /// At most this many training points per anchor are used (0 = all).
    pub max_points_per_anchor: usize,
    pub init: Init,
    pub seed: u64,
    /// Distance precision on GPU backends (default `Exact`).
    pub precision: Precision,
}

impl Default for AnchorParams {
    fn default() -> Self {
        AnchorParams {
            anchors: 1024,
            // Recall at nprobe <= 64 changed by under 0.005 beyond 10 iterations on the dev
            // sets, while training time grew with each (docs/training.md).
            max_iters: 10,
            tol: 1e-4,
            initial_temp: 1.0,
            cooling_rate: 0.9,
            trim: 0.05,
            balance: 0.3,
            maintenance_interval: 5,
            merge_threshold: 0.05,
            split_factor: 2.0,
            // 128 per anchor: GloVe (199K vectors) trained in 2.6 s instead of 3.1 s for
            // 0.003 of recall@10 at nprobe 64; smaller sets are unaffected.
            max_points_per_anchor: 128,
            // A seeded sample places anchors where the points are; k-means++ over-seeds outliers
            // (long-norm word vectors, say), which measured worse for IVF recall.
            init: Init::Sample,
            seed: 0x5eed,
            precision: Precision::Exact,
        }
    }
}

impl AnchorParams {
    pub fn validate(&self) -> Result<()> {
        if self.anchors == 0 || self.anchors > u32::MAX as usize {
            invalid!("anchors = {}: must be in 1..={}", self.anchors, u32::MAX);
        }
        if self.max_iters == 0 {
            invalid!("max_iters = 0: must be >= 1");
        }
        if !(self.tol >= 0.0 && self.tol.is_finite()) {
            invalid!("tol = {}: must be finite and >= 0", num(self.tol));
        }
        let f = |v: f32| num(v as f64);
        if !(self.initial_temp >= 0.0 && self.initial_temp.is_finite()) {
            invalid!(
                "initial_temp = {}: must be finite and >= 0",
                f(self.initial_temp)
            );
        }
        if !(self.cooling_rate > 0.0 && self.cooling_rate <= 1.0) {
            invalid!("cooling_rate = {}: must be in (0, 1]", f(self.cooling_rate));
        }
        if !(self.trim >= 0.0 && self.trim < 0.5) {
            invalid!("trim = {}: must be in [0, 0.5)", f(self.trim));
        }
        if !(self.balance >= 0.0 && self.balance.is_finite()) {
            invalid!("balance = {}: must be finite and >= 0", f(self.balance));
        }
        if !(self.merge_threshold >= 0.0 && self.merge_threshold.is_finite()) {
            invalid!(
                "merge_threshold = {}: must be finite and >= 0",
                f(self.merge_threshold)
            );
        }
        if !(self.split_factor > 1.0 && self.split_factor.is_finite()) {
            invalid!(
                "split_factor = {}: must be finite and > 1",
                f(self.split_factor)
            );
        }
        Ok(())
    }

    /// Plain Lloyd k-means with the same engine (no annealing, trimming or maintenance beyond
    /// re-seeding empty anchors): used for PQ sub-codebooks, where distortion is all that counts.
    pub fn lloyd(k: usize, iters: usize, seed: u64) -> Self {
        AnchorParams {
            anchors: k,
            max_iters: iters,
            tol: 0.0,
            initial_temp: 0.0,
            trim: 0.0,
            balance: 0.0,
            maintenance_interval: 0,
            max_points_per_anchor: 0,
            seed,
            ..Default::default()
        }
    }
}

/// The largest residual code training makes (and files may hold), in bytes per vector.
pub const MAX_BYTES_PER_VECTOR: usize = 4096;

/// Everything a Compressor needs to train a Codebook.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TrainParams {
    pub metric: Metric,
    pub anchor: AnchorParams,
    /// Bytes per vector of residual code (in an index the anchor is implied by the list).
    pub bytes_per_vector: usize,
    /// Bits per sub-code: 8 (256 centroids) or 4 (16 centroids, two codes per byte).
    pub bits: u32,
    pub rotation: Rotation,
    /// Lloyd iterations for each PQ sub-codebook.
    pub pq_iters: usize,
    /// Training points for the PQ sub-codebooks (0 = all); 256 per centroid is plenty.
    pub pq_train_points: usize,
    /// Alternations of the learned rotation (Rotation::Learned only) after its
    /// eigenvalue-allocation start; 0 keeps that start.
    pub opq_iters: usize,
    /// Training points the learned rotation is fitted on (0 = the whole PQ sample).
    pub opq_train_points: usize,
    /// Whether the last sub-code of each code (a byte, or a nibble at 4 bits) names the
    /// squared error of the others (L2 search then adds it to each code's distance: the
    /// distance to the vector itself is, on average, the distance to its reconstruction plus
    /// that error).
    pub error_code: ErrorCode,
}

impl Default for TrainParams {
    fn default() -> Self {
        TrainParams {
            metric: Metric::L2,
            anchor: AnchorParams::default(),
            bytes_per_vector: 16,
            bits: 8,
            // The eigenvalue-allocation start alone: 3-8 points of recall@10 over no rotation
            // on the dev sets for about a second of training; the Procrustes alternations
            // (opq_iters) added nothing measurable there (docs/training.md).
            rotation: Rotation::Learned,
            pq_iters: 25,
            pq_train_points: 65_536,
            opq_iters: 0,
            opq_train_points: 65_536,
            // On the dev sets at the same bytes, an error level in place of a sub-quantizer:
            // recall@10 +0.04 on MiniLM (12 dimensions a byte), +0.03 on Fashion-MNIST (12),
            // +0.05 and +0.045 with 4-bit codes, +0.01 at 6 a byte, none at 3 (GloVe at
            // 16 B): `Auto`.
            error_code: ErrorCode::Auto,
        }
    }
}

impl TrainParams {
    /// Number of sub-quantizers M for the chosen bytes and bits, on `d` dimensions: one
    /// fewer where the codes keep an error level (which takes a sub-code's bits).
    pub fn subquantizers(&self, d: usize) -> usize {
        self.bytes_per_vector * 8 / self.bits as usize - self.error_code_for(d) as usize
    }

    /// Whether codes of `d` dimensions keep an error level: `On`, or `Auto` with L2, codes
    /// of at least 2 bytes and at least 8 dimensions per byte.
    pub fn error_code_for(&self, d: usize) -> bool {
        let fits = self.metric == Metric::L2 && self.bytes_per_vector >= 2;
        match self.error_code {
            ErrorCode::Off => false,
            ErrorCode::On => fits,
            ErrorCode::Auto => fits && d >= 8 * self.bytes_per_vector,
        }
    }

    pub fn validate(&self) -> Result<()> {
        self.anchor.validate()?;
        if self.bits != 8 && self.bits != 4 {
            invalid!("bits = {}: must be 8 or 4", self.bits);
        }
        if self.bytes_per_vector == 0 || self.bytes_per_vector > MAX_BYTES_PER_VECTOR {
            invalid!(
                "bytes_per_vector = {}: must be in 1..={MAX_BYTES_PER_VECTOR}",
                self.bytes_per_vector
            );
        }
        if self.pq_iters == 0 {
            invalid!("pq_iters = 0: must be >= 1");
        }
        if self.error_code == ErrorCode::On
            && (self.metric != Metric::L2 || self.bytes_per_vector < 2)
        {
            invalid!(
                "error_code = on needs the L2 metric and at least 2 bytes (metric {:?}, {} bytes)",
                self.metric,
                self.bytes_per_vector
            );
        }
        Ok(())
    }
}

/// Per-call search parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SearchParams {
    /// Results per query.
    pub k: usize,
    /// Inverted lists probed per query.
    pub nprobe: usize,
    /// Candidates re-ranked exactly against raw vectors (0 = no re-rank; otherwise >= k).
    pub rerank: usize,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            k: 10,
            nprobe: 16,
            rerank: 0,
        }
    }
}

impl SearchParams {
    pub fn validate(&self) -> Result<()> {
        if self.k == 0 {
            invalid!("k = 0: must be >= 1");
        }
        if self.nprobe == 0 {
            invalid!("nprobe = 0: must be >= 1");
        }
        if self.rerank != 0 && self.rerank < self.k {
            invalid!("rerank = {}: must be 0 or >= k = {}", self.rerank, self.k);
        }
        Ok(())
    }
}
