//! Paths as a library inside someone else's process must treat them. Reads open regular files
//! only: a FIFO would block the caller forever and a device or directory means a wrong path.
//! Writes replace a regular file (or create one) atomically through a temporary file beside
//! it, keep the replaced file's mode and owner, and refuse anything that is not a regular file:
//! `/dev/null` stays a device. A symbolic link is followed and its target replaced, so the link
//! survives. Temporaries left by a killed process are removed by the next save beside them.

use crate::error::{Error, Result};
use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};

/// Symbolic links followed before a path is refused (Linux's own limit).
const MAX_LINKS: usize = 40;

/// What a file that is not a regular one is, for messages.
fn kind_name(m: &Metadata) -> &'static str {
    let t = m.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, m: &Metadata) -> Error {
    Error::InvalidArgument(format!(
        "{} is {}, not a regular file",
        path.display(),
        kind_name(m)
    ))
}

/// Opens `path` for reading if it is a regular file (after following links); anything else
/// is an `InvalidArgument` naming what it is, found without blocking.
pub(crate) fn open_regular(path: &Path) -> Result<File> {
    let io = |e| Error::io(format!("opening {}", path.display()), e);
    let m = std::fs::metadata(path).map_err(io)?;
    if !m.is_file() {
        return Err(not_regular(path, &m));
    }
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    // The path may have been swapped for a FIFO since the check: never block on opening it.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_NONBLOCK);
    let f = o.open(path).map_err(io)?;
    let m = f.metadata().map_err(io)?;
    if !m.is_file() {
        return Err(not_regular(path, &m));
    }
    Ok(f)
}

/// Reads a whole regular file.
pub(crate) fn read_regular(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut f = open_regular(path)?;
    let mut v = Vec::new();
    f.read_to_end(&mut v)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    Ok(v)
}

/// The file a save to `path` replaces: links followed to their end. Returns that path and
/// the metadata of the regular file there, or None when nothing is there yet.
fn resolve(path: &Path) -> Result<(PathBuf, Option<Metadata>)> {
    let mut p = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)
                    .map_err(|e| Error::io(format!("reading the link {}", p.display()), e))?;
                p = match p.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            Ok(m) if m.is_file() => return Ok((p, Some(m))),
            Ok(m) => return Err(not_regular(&p, &m)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((p, None)),
            Err(e) => return Err(Error::io(format!("looking at {}", p.display()), e)),
        }
    }
    Err(Error::InvalidArgument(format!(
        "{}: more than {MAX_LINKS} symbolic links to follow",
        path.display()
    )))
}

/// Temporary files of a save to `name` are `.{name}.vlcc-{pid}-{seq}.tmp`.
fn temp_name(name: &str, pid: u32, seq: u64) -> String {
    format!(".{name}.vlcc-{pid}-{seq}.tmp")
}

/// The process that wrote temporary file `file` of a save to `name`, if it is one.
fn temp_owner(file: &str, name: &str) -> Option<u32> {
    let rest = file
        .strip_prefix('.')?
        .strip_prefix(name)?
        .strip_prefix(".vlcc-")?
        .strip_suffix(".tmp")?;
    let (pid, seq) = rest.split_once('-')?;
    seq.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether process `pid` exists (a process of another user counts).
fn alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return true;
        };
        // SAFETY: signal 0 only checks that the process exists; nothing is sent.
        if unsafe { libc::kill(p, 0) } == 0 {
            return true;
        }
        std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Removes the temporaries of saves to `name` in `dir` whose process is gone (killed while
/// saving). Best effort: a file that cannot be read or removed stays.
fn remove_stale(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file.to_str().and_then(|f| temp_owner(f, name)) else {
            continue;
        };
        if pid != std::process::id() && !alive(pid) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Gives the new file `f` the mode and, where permitted, the owner of the file it replaces.
fn keep_identity(f: &File, old: &Metadata) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let mine = f.metadata()?;
        if (mine.uid(), mine.gid()) != (old.uid(), old.gid()) {
            // Only root may give a file away; others keep their own ownership.
            let _ = std::os::unix::fs::fchown(f, Some(old.uid()), Some(old.gid()));
        }
    }
    f.set_permissions(old.permissions())
}

/// Writes through `f` into a temporary file beside `path` (beside the target of its links),
/// fsyncs, then renames it into place. A file already at `path` must be a regular file; the
/// new one keeps its mode and owner, and a new file's mode follows the umask. On any error
/// the temporary file is removed and `path` is untouched.
pub fn write_atomically(path: &Path, f: impl FnOnce(&File) -> std::io::Result<()>) -> Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let (target, old) = resolve(path)?;
    let name = target
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| {
            Error::InvalidArgument(format!("{} is not a UTF-8 file path", path.display()))
        })?
        .to_owned();
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    remove_stale(dir, &name);
    let tmp = dir.join(temp_name(
        &name,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
    ));
    let run = || -> std::io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        if let Some(old) = &old {
            keep_identity(&file, old)?;
        }
        f(&file)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, &target)?;
        // Make the rename itself durable; not every platform can open a directory.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    run().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(format!("writing {}", path.display()), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_parse_back() {
        let t = temp_name("index.vlcc", 4242, 7);
        assert_eq!(temp_owner(&t, "index.vlcc"), Some(4242));
        assert_eq!(temp_owner(&t, "other.vlcc"), None);
        assert_eq!(temp_owner(".index.vlcc.vlcc-12-x.tmp", "index.vlcc"), None);
        assert_eq!(temp_owner("index.vlcc", "index.vlcc"), None);
    }

    #[test]
    fn this_process_is_alive() {
        assert!(alive(std::process::id()));
    }
}
