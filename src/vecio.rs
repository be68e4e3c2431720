//! Vector files: `.fvecs`/`.ivecs` (TEXMEX) and `.npy` (2-D, little-endian f32, f16, u8, i32).
//! Every size is checked before use; a malformed file is an error, never a panic.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::Path;

/// A row-major matrix read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix<T> {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<T>,
}

/// Element types of a `.npy` file this crate reads.
#[derive(Clone, Debug, PartialEq)]
pub enum NpyData {
    F32(Matrix<f32>),
    F16(Matrix<half::f16>),
    U8(Matrix<u8>),
    I32(Matrix<i32>),
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    crate::files::read_regular(path)
}

fn corrupt(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("{}: {msg}", path.display()))
}

fn read_vecs<T: bytemuck::Pod>(path: &Path) -> Result<Matrix<T>> {
    parse_vecs(&read_file(path)?, path)
}

fn parse_vecs<T: bytemuck::Pod>(bytes: &[u8], path: &Path) -> Result<Matrix<T>> {
    if bytes.is_empty() {
        return Ok(Matrix {
            rows: 0,
            cols: 0,
            data: Vec::new(),
        });
    }
    if bytes.len() < 4 {
        return Err(corrupt(path, "shorter than one record header"));
    }
    let d = i32::from_le_bytes(bytes[0..4].try_into().unwrap());
    if d <= 0 || d > 1 << 20 {
        return Err(corrupt(path, format!("bad dimension {d}")));
    }
    let d = d as usize;
    let rec = 4 + 4 * d;
    if bytes.len() % rec != 0 {
        return Err(corrupt(
            path,
            format!(
                "size {} is not a multiple of the record size {rec}",
                bytes.len()
            ),
        ));
    }
    let n = bytes.len() / rec;
    let mut data = Vec::with_capacity(n * d);
    for (i, r) in bytes.chunks_exact(rec).enumerate() {
        if i32::from_le_bytes(r[0..4].try_into().unwrap()) as i64 != d as i64 {
            return Err(corrupt(path, format!("record {i} has another dimension")));
        }
        data.extend_from_slice(&bytemuck::pod_collect_to_vec::<u8, T>(&r[4..]));
    }
    Ok(Matrix {
        rows: n,
        cols: d,
        data,
    })
}

/// Parses `.fvecs` bytes.
pub fn parse_fvecs(bytes: &[u8]) -> Result<Matrix<f32>> {
    parse_vecs(bytes, Path::new("<memory>"))
}

/// Parses `.ivecs` bytes.
pub fn parse_ivecs(bytes: &[u8]) -> Result<Matrix<i32>> {
    parse_vecs(bytes, Path::new("<memory>"))
}

/// Reads a `.fvecs` file.
pub fn read_fvecs(path: &Path) -> Result<Matrix<f32>> {
    read_vecs(path)
}

/// Reads an `.ivecs` file.
pub fn read_ivecs(path: &Path) -> Result<Matrix<i32>> {
    read_vecs(path)
}

fn write_atomic(
    path: &Path,
    f: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    crate::format::write_atomically(path, |file| {
        let mut w = std::io::BufWriter::new(file);
        f(&mut w)?;
        w.flush()
    })
}

fn write_vecs<T: bytemuck::Pod>(path: &Path, data: &[T], cols: usize) -> Result<()> {
    if cols == 0 || data.len() % cols != 0 {
        return Err(Error::InvalidArgument(format!(
            "cannot write {} values as rows of {cols}",
            data.len()
        )));
    }
    write_atomic(path, |w| {
        for row in data.chunks_exact(cols) {
            w.write_all(&(cols as i32).to_le_bytes())?;
            w.write_all(bytemuck::cast_slice(row))?;
        }
        Ok(())
    })
}

/// Writes a `.fvecs` file (atomically).
pub fn write_fvecs(path: &Path, data: &[f32], cols: usize) -> Result<()> {
    write_vecs(path, data, cols)
}

/// Writes an `.ivecs` file (atomically).
pub fn write_ivecs(path: &Path, data: &[i32], cols: usize) -> Result<()> {
    write_vecs(path, data, cols)
}

/// Reads a 2-D (or 1-D, as one row) C-order little-endian `.npy` file.
pub fn read_npy(path: &Path) -> Result<NpyData> {
    let bytes = read_file(path)?;
    if bytes.len() < 10 || &bytes[0..6] != b"\x93NUMPY" {
        return Err(corrupt(path, "not a .npy file"));
    }
    let (hlen, hstart) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
        v => return Err(corrupt(path, format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(hstart..hstart.saturating_add(hlen))
        .ok_or_else(|| corrupt(path, "truncated header"))?;
    let header = std::str::from_utf8(header).map_err(|_| corrupt(path, "header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let at = header.find(&format!("'{key}'"))? + key.len() + 2;
        let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
        Some(rest)
    };
    let descr = field("descr")
        .and_then(|r| r.strip_prefix('\''))
        .and_then(|r| r.split('\'').next());
    let descr = descr.ok_or_else(|| corrupt(path, "no descr"))?;
    if field("fortran_order").is_some_and(|r| r.starts_with("True")) {
        return Err(corrupt(path, "Fortran-order arrays are not supported"));
    }
    let shape = field("shape")
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| corrupt(path, "no shape"))?;
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| corrupt(path, format!("bad shape ({shape})")))?;
    let (rows, cols) = match dims[..] {
        [n] => (1, n),
        [r, c] => (r, c),
        _ => {
            return Err(corrupt(
                path,
                format!("expected a 1-D or 2-D array, shape ({shape})"),
            ))
        }
    };
    let body = &bytes[hstart + hlen..];
    let count = rows
        .checked_mul(cols)
        .ok_or_else(|| corrupt(path, "shape overflows"))?;
    fn take<T: bytemuck::Pod>(
        path: &Path,
        body: &[u8],
        rows: usize,
        cols: usize,
        count: usize,
    ) -> Result<Matrix<T>> {
        let need = count
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| corrupt(path, "shape overflows"))?;
        if body.len() != need {
            return Err(corrupt(
                path,
                format!("{} data bytes, shape needs {need}", body.len()),
            ));
        }
        Ok(Matrix {
            rows,
            cols,
            data: bytemuck::pod_collect_to_vec(body),
        })
    }
    match descr {
        "<f4" => Ok(NpyData::F32(take(path, body, rows, cols, count)?)),
        "<f2" => Ok(NpyData::F16(take(path, body, rows, cols, count)?)),
        "|u1" | "<u1" => Ok(NpyData::U8(take(path, body, rows, cols, count)?)),
        "<i4" => Ok(NpyData::I32(take(path, body, rows, cols, count)?)),
        other => Err(corrupt(
            path,
            format!("unsupported dtype {other:?} (f4, f2, u1, i4 little-endian)"),
        )),
    }
}

/// Writes a 2-D `.npy` file (atomically). `descr` is numpy's type string, e.g. `<f4`.
pub fn write_npy<T: bytemuck::Pod>(
    path: &Path,
    data: &[T],
    rows: usize,
    cols: usize,
    descr: &str,
) -> Result<()> {
    if rows * cols != data.len() {
        return Err(Error::InvalidArgument(format!(
            "{} values do not make {rows} x {cols}",
            data.len()
        )));
    }
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    write_atomic(path, |w| {
        w.write_all(b"\x93NUMPY\x01\x00")?;
        w.write_all(&(header.len() as u16).to_le_bytes())?;
        w.write_all(header.as_bytes())?;
        w.write_all(bytemuck::cast_slice(data))
    })
}

/// Reads float vectors from `.fvecs` or `.npy` (f32 or f16, widened to f32).
pub fn read_vectors(path: &Path) -> Result<Matrix<f32>> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("fvecs") => read_fvecs(path),
        Some("npy") => match read_npy(path)? {
            NpyData::F32(m) => Ok(m),
            NpyData::F16(m) => Ok(Matrix {
                rows: m.rows,
                cols: m.cols,
                data: m.data.iter().map(|v| v.to_f32()).collect(),
            }),
            _ => Err(corrupt(path, "expected float32 or float16 vectors")),
        },
        _ => Err(Error::InvalidArgument(format!(
            "{}: expected a .fvecs or .npy file",
            path.display()
        ))),
    }
}

/// Writes float vectors as `.fvecs` or `.npy` by extension.
pub fn write_vectors(path: &Path, data: &[f32], cols: usize) -> Result<()> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("fvecs") => write_fvecs(path, data, cols),
        Some("npy") => write_npy(path, data, data.len() / cols.max(1), cols, "<f4"),
        _ => Err(Error::InvalidArgument(format!(
            "{}: expected a .fvecs or .npy output",
            path.display()
        ))),
    }
}

/// Float vectors in the precision the file holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Floats {
    F32(Matrix<f32>),
    F16(Matrix<half::f16>),
}

/// Reads `.fvecs` or `.npy` vectors keeping f16 as f16 (the encoder widens block by block).
pub fn read_floats(path: &Path) -> Result<Floats> {
    if path.extension().and_then(|e| e.to_str()) == Some("npy") {
        if let NpyData::F16(m) = read_npy(path)? {
            return Ok(Floats::F16(m));
        }
    }
    read_vectors(path).map(Floats::F32)
}
