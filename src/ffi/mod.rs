//! The C ABI: the only `extern "C"` code in the crate. `include/vlc_compress.h` is generated
//! from these items by cbindgen; the doc comments here are the header's documentation.
//!
//! Conventions (also in the header and README): every fallible call returns a `vlcc_status`;
//! out-parameters come last and are written only on success; a `const` handle means the call
//! does not change it; every `_new`/`_load` has a matching `_free`, and `_free(NULL)` does nothing;
//! no panic crosses the boundary.

#![deny(missing_docs)]
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

#[macro_use]
mod boundary;
pub mod buffer;
pub mod compressor;
pub mod context;
pub mod error;
pub mod index;
pub mod memory;
pub mod progress;
pub mod range;
pub mod report;
pub mod search_params;
pub mod status;
pub mod version;

pub use buffer::*;
pub use compressor::*;
pub use context::*;
pub use error::*;
pub use index::*;
pub use memory::*;
pub use progress::*;
pub use report::*;
pub use search_params::*;
pub use status::*;
pub use version::*;
