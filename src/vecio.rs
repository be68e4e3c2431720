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
    F64(Matrix<f64>),
    U8(Matrix<u8>),
    I32(Matrix<i32>),
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
    if !bytes.len().is_multiple_of(rec) {
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

/// Reads a whole regular file; a FIFO, device or directory is an `InvalidArgument` naming
/// what it is, found without blocking (as every reader here).
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    crate::files::read_regular(path)
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
    if cols == 0 || !data.len().is_multiple_of(cols) {
        return Err(Error::InvalidArgument(format!(
            "cannot write {} values as rows of {cols}",
            data.len()
        )));
    }
    let offsets: Vec<usize> = (0..=data.len() / cols).map(|r| r * cols).collect();
    write_ragged(path, data, &offsets)
}

/// Writes `.fvecs` / `.ivecs` rows of their own lengths (atomically): row i is
/// `data[offsets[i]..offsets[i + 1]]`, as a range search's hits are.
pub fn write_ragged<T: bytemuck::Pod>(path: &Path, data: &[T], offsets: &[usize]) -> Result<()> {
    let bad = offsets
        .windows(2)
        .any(|w| w[0] > w[1] || w[1] - w[0] > i32::MAX as usize);
    if bad
        || offsets.first().is_some_and(|&o| o != 0)
        || offsets.last().is_some_and(|&o| o != data.len())
    {
        return Err(Error::InvalidArgument(format!(
            "offsets do not split {} values into rows",
            data.len()
        )));
    }
    write_atomic(path, |w| {
        for o in offsets.windows(2) {
            w.write_all(&((o[1] - o[0]) as i32).to_le_bytes())?;
            w.write_all(bytemuck::cast_slice(&data[o[0]..o[1]]))?;
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

/// Reads a 1-D or 2-D `.npy` array (numpy's own header parser, `npyz`): float32, float16 and
/// float64, int32 and uint8, in either byte order and in C or Fortran order (returned row
/// major). A refusal names what the file holds: dtype, byte order and shape.
pub fn read_npy(path: &Path) -> Result<NpyData> {
    let bytes = read_file(path)?;
    parse_npy(&bytes, path)
}

fn parse_npy(bytes: &[u8], path: &Path) -> Result<NpyData> {
    use npyz::{DType, Endianness, NpyFile, NpyHeader, Order, TypeChar};
    let mut body = bytes;
    let header = NpyHeader::from_reader(&mut body)
        .map_err(|e| corrupt(path, format!("not a readable .npy file ({e})")))?;
    let shape = header.shape().to_vec();
    let fortran = header.order() == Order::Fortran;
    let DType::Plain(ts) = header.dtype() else {
        return Err(corrupt(
            path,
            "a structured (record) array: expected plain numbers",
        ));
    };
    let order = match ts.endianness() {
        Endianness::Little => "little-endian",
        Endianness::Big => "big-endian",
        Endianness::Irrelevant => "single-byte",
    };
    let what = format!(
        "{} {order} ({ts}) array of shape ({}){}",
        kind_name(ts.type_char(), ts.size_field()),
        shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        if fortran { " in Fortran order" } else { "" }
    );
    let refuse = |why: &str| corrupt(path, format!("{what}: {why}"));
    let (rows, cols) = match shape[..] {
        [n] => (1, n as usize),
        [r, c] => (r as usize, c as usize),
        _ => return Err(refuse("expected a 1-D or 2-D array")),
    };
    let count = rows
        .checked_mul(cols)
        .ok_or_else(|| refuse("the shape overflows"))?;
    let item = ts.num_bytes().unwrap_or(0);
    let need = count.checked_mul(item);
    if need != Some(body.len()) {
        return Err(refuse(&format!(
            "{} data bytes where the shape needs {}",
            body.len(),
            need.map_or("more than memory holds".into(), |n| n.to_string())
        )));
    }
    fn take<T: npyz::Deserialize + Copy>(
        header: NpyHeader,
        body: &[u8],
        rows: usize,
        cols: usize,
        fortran: bool,
        refuse: &dyn Fn(&str) -> Error,
    ) -> Result<Matrix<T>> {
        let v: Vec<T> = NpyFile::with_header(header, body)
            .into_vec()
            .map_err(|e| refuse(&e.to_string()))?;
        // Column-major data: row i is every rows-th value from i.
        let data = if fortran && rows > 1 && cols > 1 {
            (0..rows * cols)
                .map(|k| v[(k % cols) * rows + k / cols])
                .collect()
        } else {
            v
        };
        Ok(Matrix { rows, cols, data })
    }
    // The matrix of the file's element type, under its variant.
    macro_rules! as_ {
        ($v:ident) => {
            Ok(NpyData::$v(take(
                header, body, rows, cols, fortran, &refuse,
            )?))
        };
    }
    match (ts.type_char(), ts.size_field()) {
        (TypeChar::Float, 4) => as_!(F32),
        (TypeChar::Float, 2) => as_!(F16),
        (TypeChar::Float, 8) => as_!(F64),
        (TypeChar::Uint, 1) => as_!(U8),
        (TypeChar::Int, 4) => as_!(I32),
        _ => Err(refuse("expected float32, float16, float64, int32 or uint8")),
    }
}

/// numpy's name for a type character and size: `float64`, `int16`, ...
fn kind_name(c: npyz::TypeChar, size: u64) -> String {
    use npyz::TypeChar;
    let bits = size * 8;
    match c {
        TypeChar::Float => format!("float{bits}"),
        TypeChar::Int => format!("int{bits}"),
        TypeChar::Uint => format!("uint{bits}"),
        TypeChar::Complex => format!("complex{bits}"),
        TypeChar::Bool => "bool".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// A version-1 `.npy` header (magic, version, length, then the dictionary padded so the data
/// start on a 64-byte boundary) for `descr` (numpy's type string), order and `shape` ("(r, c)").
fn npy_header(descr: &str, fortran: bool, shape: &str) -> Vec<u8> {
    let order = if fortran { "True" } else { "False" };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}");
    h.push_str(&" ".repeat((64 - (10 + h.len() + 1) % 64) % 64));
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out
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
    let header = npy_header(descr, false, &format!("({rows}, {cols})"));
    write_atomic(path, |w| {
        w.write_all(&header)?;
        w.write_all(bytemuck::cast_slice(data))
    })
}

/// Reads float vectors from `.fvecs` or `.npy` (f16 widened, f64 narrowed to f32).
pub fn read_vectors(path: &Path) -> Result<Matrix<f32>> {
    Ok(match read_floats(path)? {
        Floats::F32(m) => m,
        Floats::F16(m) => Matrix {
            rows: m.rows,
            cols: m.cols,
            data: m.data.iter().map(|v| v.to_f32()).collect(),
        },
    })
}

/// float64 values as float32 (numpy's default dtype); a finite value beyond float32's range
/// is refused by position, as NaN and infinities are later by the library.
fn narrow(path: &Path, m: Matrix<f64>) -> Result<Matrix<f32>> {
    let mut data = Vec::with_capacity(m.data.len());
    for (k, &v) in m.data.iter().enumerate() {
        let f = v as f32;
        if v.is_finite() && !f.is_finite() {
            return Err(corrupt(
                path,
                format!(
                    "float64 value {v:e} at row {}, column {} is beyond float32's range",
                    k / m.cols.max(1),
                    k % m.cols.max(1)
                ),
            ));
        }
        data.push(f);
    }
    Ok(Matrix {
        rows: m.rows,
        cols: m.cols,
        data,
    })
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

/// Reads `.fvecs` or `.npy` vectors keeping f16 as f16 (the encoder widens block by block;
/// f64 is narrowed to f32). The file is read once.
pub fn read_floats(path: &Path) -> Result<Floats> {
    let ints = |kind: &str, r: usize, c: usize| {
        Err(corrupt(
            path,
            format!("{kind} array ({r} x {c}): expected float vectors"),
        ))
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("fvecs") => read_fvecs(path).map(Floats::F32),
        Some("npy") => match read_npy(path)? {
            NpyData::F32(m) => Ok(Floats::F32(m)),
            NpyData::F16(m) => Ok(Floats::F16(m)),
            NpyData::F64(m) => narrow(path, m).map(Floats::F32),
            NpyData::U8(m) => ints("a uint8", m.rows, m.cols),
            NpyData::I32(m) => ints("an int32", m.rows, m.cols),
        },
        _ => Err(Error::InvalidArgument(format!(
            "{}: expected a .fvecs or .npy file",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` file: the header for `descr`, `shape` and order, then `body`.
    fn npy(descr: &str, fortran: bool, shape: &str, body: &[u8]) -> Vec<u8> {
        let mut out = npy_header(descr, fortran, shape);
        out.extend_from_slice(body);
        out
    }

    fn read(bytes: &[u8]) -> Result<Matrix<f32>> {
        let dir = std::env::temp_dir().join(format!("vlcc-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:x}.npy", xxhash_rust::xxh3::xxh3_64(bytes)));
        std::fs::write(&path, bytes).unwrap();
        let r = read_vectors(&path);
        std::fs::remove_file(&path).unwrap();
        r
    }

    const V: [f32; 6] = [1.5, -2.0, 3.25, 0.0, 1e-3, 7.0];

    #[test]
    fn every_float_kind_and_byte_order_reads_as_the_same_rows() {
        let le4: Vec<u8> = V.iter().flat_map(|v| v.to_le_bytes()).collect();
        let be4: Vec<u8> = V.iter().flat_map(|v| v.to_be_bytes()).collect();
        let le8: Vec<u8> = V.iter().flat_map(|&v| (v as f64).to_le_bytes()).collect();
        let be8: Vec<u8> = V.iter().flat_map(|&v| (v as f64).to_be_bytes()).collect();
        let h = |v: &f32| half::f16::from_f32(*v);
        let le2: Vec<u8> = V.iter().flat_map(|v| h(v).to_le_bytes()).collect();
        let be2: Vec<u8> = V.iter().flat_map(|v| h(v).to_be_bytes()).collect();
        let halves: Vec<f32> = V.iter().map(|v| h(v).to_f32()).collect();
        for (descr, body, want) in [
            ("<f4", &le4, &V[..]),
            (">f4", &be4, &V[..]),
            ("<f8", &le8, &V[..]),
            (">f8", &be8, &V[..]),
            ("<f2", &le2, &halves[..]),
            (">f2", &be2, &halves[..]),
        ] {
            let m = read(&npy(descr, false, "(2, 3)", body)).unwrap();
            assert_eq!((m.rows, m.cols, &m.data[..]), (2, 3, want), "{descr}");
        }
        // Fortran order: the file holds the columns; the rows come back.
        let cols: Vec<u8> = [0, 3, 1, 4, 2, 5]
            .iter()
            .flat_map(|&i| V[i].to_le_bytes())
            .collect();
        let m = read(&npy("<f4", true, "(2, 3)", &cols)).unwrap();
        assert_eq!((m.rows, m.cols, &m.data[..]), (2, 3, &V[..]));
    }

    #[test]
    fn refusals_name_the_dtype_order_and_shape() {
        let msg = |b: Vec<u8>| read(&b).unwrap_err().to_string();
        let e = msg(npy("<i8", false, "(2, 3)", &[0u8; 48]));
        assert!(
            e.contains("int64 little-endian (<i8) array of shape (2, 3)"),
            "{e}"
        );
        let e = msg(npy(">f4", false, "(2, 3, 1)", &[0u8; 24]));
        assert!(
            e.contains("float32 big-endian (>f4) array of shape (2, 3, 1)"),
            "{e}"
        );
        assert!(e.contains("1-D or 2-D"), "{e}");
        let e = msg(npy("<f4", false, "(2, 3)", &[0u8; 20]));
        assert!(e.contains("20 data bytes where the shape needs 24"), "{e}");
        let big: Vec<u8> = [1.0f64, 1e300, 2.0, 3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let e = msg(npy("<f8", false, "(2, 2)", &big));
        assert!(e.contains("1e300 at row 0, column 1"), "{e}");
        let e = msg(npy("|u1", false, "(2, 3)", &[0u8; 6]));
        assert!(e.contains("uint8 array (2 x 3)"), "{e}");
        let e = msg(b"\x93NUMPY\x01\x00\xff\xff{".to_vec());
        assert!(e.contains("not a readable .npy file"), "{e}");
    }
}
