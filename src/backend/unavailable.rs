//! Backends not compiled into this build: they exist in every build and say so clearly.

use super::Backend;
use crate::error::{Error, Result};

pub(super) fn wgpu(_device: usize) -> Result<Box<dyn Backend>> {
    Err(Error::BackendUnavailable(
        "this build has no WGPU backend (feature `wgpu`)".into(),
    ))
}
