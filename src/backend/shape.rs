//! The shapes of work a backend sizes its device memory for: plain numbers, known before the
//! work starts, from which each backend answers the device bytes its own buffers take.

use crate::params::{Metric, Rotation, TrainParams};

/// What the memory of encoding, adding and searching depends on: a codebook's shape, known
/// from the parameters before training or from a trained codebook (`Codebook::shape`).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub anchors: usize,
    pub d: usize,
    /// The padded dimension the sub-quantizers split.
    pub dp: usize,
    pub nsub: usize,
    /// Fields of a code an encoder writes a row: the sub-codes and the error level, if any.
    pub fields: usize,
    pub ksub: usize,
    /// Bytes of residual code per vector.
    pub code: usize,
    pub metric: Metric,
    /// Whether residuals are rotated before the sub-quantizers.
    pub rotated: bool,
}

impl Shape {
    /// The shape training `p` on `n` x `d` vectors gives.
    pub fn of_params(p: &TrainParams, n: usize, d: usize) -> Shape {
        let nsub = p.subquantizers(d).max(1);
        let fields = nsub + usize::from(p.error_code_for(d));
        Shape {
            anchors: p.anchor.anchors.min(n.max(1)),
            d,
            dp: nsub * d.div_ceil(nsub),
            nsub,
            fields,
            ksub: 1 << p.bits,
            code: (fields * p.bits as usize).div_ceil(8),
            metric: p.metric,
            rotated: p.rotation != Rotation::None,
        }
    }
}

/// One k-means session as a training opens it: `points` rows of `d` values against
/// `centroids` centroids, with distances exact (else at the device's fast precision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmeansShape {
    pub points: usize,
    pub d: usize,
    pub centroids: usize,
    pub exact: bool,
}

/// A product-quantizer assignment run at once: `rows` rows of `dp` values in `nsub`
/// sub-spaces, against `ksub` centroids in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PqAssignShape {
    pub rows: usize,
    pub nsub: usize,
    pub dp: usize,
    pub ksub: usize,
}

/// A search of the lists on the device: `n` vectors of `codes`'s shape, `nq` queries probing
/// `probes` lists with `want` candidates each; `terms` where the host keeps the lists' L2
/// terms (the device then holds a copy).
#[derive(Clone, Copy, Debug)]
pub struct SearchShape {
    pub codes: Shape,
    pub n: usize,
    pub nq: usize,
    pub probes: super::Probes,
    pub want: usize,
    pub terms: bool,
}

impl SearchShape {
    /// Device bytes a list search of this shape takes at its peak, queries in batches of up
    /// to `batch`: the vectors (ids and codes) with the lists' offsets and terms, uploaded by
    /// the first search and kept until the lists change (counted every time), and per batch
    /// the queries, their anchor scores, probes, padded and rotated copies and tables, then
    /// their candidates. The model both GPU backends' scans follow.
    pub fn list_scan_bytes(&self, batch: usize) -> usize {
        let s = &self.codes;
        let terms = if self.terms {
            s.anchors * s.nsub * s.ksub * 4
        } else {
            0
        };
        let lists = self.n * (8 + s.code) + (s.anchors + 1) * 4 + terms;
        let nb = self.nq.clamp(1, batch);
        let np = self.probes.get();
        let tables = nb * (s.d + 2 * np + s.dp + s.nsub * s.ksub) * 4;
        let probe = tables + nb * s.anchors * 4;
        let scan = tables + nb * np * self.want * 8 + nb * self.want * 12;
        lists + probe.max(scan)
    }
}
