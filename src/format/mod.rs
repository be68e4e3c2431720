//! One file format for codebooks and indexes (`docs/format.md` has the byte layout):
//! a 64-byte header (magic, version, kind, section count, file length, codebook fingerprint,
//! table checksum, header checksum), a table of sections (id, offset, length, xxh3 checksum),
//! and the sections, each 64-byte aligned so ids and codes are used in place from a memory map.
//! Little-endian throughout. Saving writes a temporary file, fsyncs it and renames it over the
//! target (`crate::files`), so a crash never leaves a half-written file under the real name.

mod lists;
mod read;
mod write;

pub use crate::files::write_atomically;
pub(crate) use lists::{List, Lists, MappedLists};
pub use read::{load_codebook, read_codebook_bytes};
pub(crate) use read::{load_index, read_index_bytes};
pub use write::{codebook_bytes, save_codebook};
pub(crate) use write::{index_bytes, save_index, try_index_bytes};

use std::path::Path;

/// First 8 bytes of every file.
pub const MAGIC: [u8; 8] = *b"VLCCMPR\0";
/// Format version this build writes and reads: 3 for files whose codes keep an error level
/// (a LEVELS section), 2 for the rest, so that a reader of version 2 refuses the former with
/// `UnsupportedVersion` instead of misreading their codes.
pub const VERSION: u32 = 3;
/// The version of files without error levels.
pub(crate) const VERSION_PLAIN: u32 = 2;
pub(crate) const HEADER: usize = 64;
pub(crate) const ENTRY: usize = 32;
pub(crate) const ALIGN: usize = 64;
pub(crate) const MAX_SECTIONS: usize = 16;

/// What a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Codebook = 1,
    Index = 2,
}

/// Section ids.
pub(crate) mod sec {
    pub const META: u32 = 1;
    pub const ANCHORS: u32 = 2;
    pub const ROTATION: u32 = 3;
    pub const PQ: u32 = 4;
    pub const LIST_OFFSETS: u32 = 5;
    pub const IDS: u32 = 6;
    pub const CODES: u32 = 7;
    /// Refinement rows (index files whose META says so).
    pub const REFINE: u32 = 8;
    /// Error levels a code's last byte names (`ProductQuantizer::levels`; version 3).
    pub const LEVELS: u32 = 9;
}

/// META section: 48 bytes of little-endian fields (docs/format.md).
pub(crate) const META_LEN: usize = 48;

pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

pub(crate) fn align_up(x: usize) -> usize {
    x.div_ceil(ALIGN) * ALIGN
}
