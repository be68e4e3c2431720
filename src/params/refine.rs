//! What refinement vectors an index keeps: the plain choice, its codes in files and the C ABI,
//! its names, and the bytes of a row. The rows themselves are made and read by the index.

use crate::error::{Error, Result};

/// What refinement vectors an index keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Refine {
    /// None: re-rank needs raw vectors from the caller, and hits have no distance bounds.
    #[default]
    None,
    /// Error bounds only.
    Bound,
    /// Half-precision vectors.
    F16,
    /// Scalar-quantized residuals, 8 bits per value.
    Int8,
}

impl Refine {
    /// The number files and the C ABI use.
    pub fn code(self) -> u32 {
        match self {
            Refine::None => 0,
            Refine::F16 => 1,
            Refine::Int8 => 2,
            Refine::Bound => 3,
        }
    }

    pub fn from_code(c: u32) -> Option<Refine> {
        match c {
            0 => Some(Refine::None),
            1 => Some(Refine::F16),
            2 => Some(Refine::Int8),
            3 => Some(Refine::Bound),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Refine::None => "none",
            Refine::F16 => "f16",
            Refine::Int8 => "int8",
            Refine::Bound => "bound",
        }
    }

    /// Bytes of one vector's row at dimension `d`.
    pub fn row_bytes(self, d: usize) -> usize {
        match self {
            Refine::None => 0,
            Refine::Bound => 2,
            Refine::F16 => 2 + 2 * d,
            Refine::Int8 => 2 + 4 + d,
        }
    }

    /// Whether re-ranks read vectors from these rows.
    pub fn has_vectors(self) -> bool {
        matches!(self, Refine::F16 | Refine::Int8)
    }
}

impl std::str::FromStr for Refine {
    type Err = Error;
    fn from_str(s: &str) -> Result<Refine> {
        match s {
            "none" => Ok(Refine::None),
            "f16" => Ok(Refine::F16),
            "int8" => Ok(Refine::Int8),
            "bound" => Ok(Refine::Bound),
            _ => Err(Error::InvalidArgument(format!(
                "refine {s:?}: expected none, bound, f16 or int8"
            ))),
        }
    }
}

impl std::fmt::Display for Refine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
