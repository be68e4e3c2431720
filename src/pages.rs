//! The library's allocator. While any context has a memory cap, allocations of
//! [`OWN_PAGES_FROM`] bytes and more get pages mapped for them alone, returned to the system
//! when freed; the rest of the time, and for smaller ones, the system's allocator serves them.
//! A host's allocator keeps what it frees and, with its default settings, serves later large
//! requests from fresh memory beside it (glibc raises its mmap threshold after each large
//! free): capped calls then grew resident memory up to 50% past their cap. On pages of their
//! own, what the large buffers take is what resident memory grows by, so the cap bounds what
//! a host sees whatever its allocator's settings (copies of caller data, the id map and
//! serialized buffers included). Without caps, calls keep the system allocator's reuse of
//! warm memory (mapping fresh pages for each large buffer cost training about 10%).
//! Mapped pages on Linux only; elsewhere the system's allocator serves everything.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The size from which an allocation gets its own pages while a cap is set.
pub const OWN_PAGES_FROM: usize = 128 << 10;

/// Contexts with a memory cap now (`cap_changed`).
static CAPPED: AtomicUsize = AtomicUsize::new(0);

/// A context's memory cap went from `was` to `now` bytes (0 = none): while any context has
/// one, large allocations get their own pages.
pub(crate) fn cap_changed(was: usize, now: usize) {
    match (was, now) {
        (0, 0) => {}
        (0, _) => {
            CAPPED.fetch_add(1, Relaxed);
        }
        (_, 0) => {
            CAPPED.fetch_sub(1, Relaxed);
        }
        _ => {}
    }
}

/// The allocator: the crate sets it as the global one where its `own-allocator` feature is on.
pub struct Pages;

/// Large allocations carry a header of `head(align)` bytes before what they hand out, whose
/// last word says how the block was made: on pages of its own, or by the system's allocator.
/// Which one is decided when the block is made, so a block outlives a change of mode.
const MAPPED: usize = 0x6d61_7070_6564;
const SYSTEM: usize = 0x7379_7374_656d;

fn large(l: &Layout) -> bool {
    l.size() >= OWN_PAGES_FROM && l.align() <= 4096
}

fn head(align: usize) -> usize {
    align.max(16)
}

/// The layout of a large block made by the system's allocator, header included.
fn with_head(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(head(align))?, align).ok()
}

/// The block start and its tag for what a large allocation handed out at `p`.
///
/// # Safety
/// `p` was handed out by `Pages` for a large layout of alignment `align`.
unsafe fn block(p: *mut u8, align: usize) -> (*mut u8, usize) {
    // SAFETY: the header lies just before `p`, in the same block.
    unsafe {
        let base = p.sub(head(align));
        (base, p.sub(8).cast::<usize>().read())
    }
}

/// Hands out the part after the header of `base` (null stays null), tagged `tag`.
///
/// # Safety
/// `base` is null or a block of at least `head(align)` bytes aligned to `align`.
unsafe fn hand_out(base: *mut u8, align: usize, tag: usize) -> *mut u8 {
    if base.is_null() {
        return base;
    }
    // SAFETY: the header's last word lies within the block; `head(align)` keeps it aligned.
    unsafe {
        let p = base.add(head(align));
        p.sub(8).cast::<usize>().write(tag);
        p
    }
}

unsafe impl GlobalAlloc for Pages {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the caller's contract.
        unsafe { self.make(l, false) }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the caller's contract.
        unsafe { self.make(l, true) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if !large(&l) {
            // SAFETY: as the caller's contract.
            return unsafe { System.dealloc(p, l) };
        }
        // SAFETY: `p` came from `make` with this layout (the caller's contract).
        unsafe {
            let (base, tag) = block(p, l.align());
            let total = l.size() + head(l.align());
            if tag == MAPPED {
                unmap(base, total);
            } else {
                System.dealloc(base, Layout::from_size_align_unchecked(total, l.align()));
            }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        // SAFETY: `size` with `l`'s alignment is a valid layout (the caller's contract).
        let to = unsafe { Layout::from_size_align_unchecked(size, l.align()) };
        if !large(&l) && !large(&to) {
            // SAFETY: as the caller's contract.
            return unsafe { System.realloc(p, l, size) };
        }
        if large(&l) && large(&to) {
            // SAFETY: `p` came from `make` with layout `l`.
            let (base, tag) = unsafe { block(p, l.align()) };
            let h = head(l.align());
            let Some(grown) = with_head(size, l.align()) else {
                return std::ptr::null_mut();
            };
            // A block keeps how it was made: remapped, or grown by the system's allocator.
            // SAFETY: `base` is the block of `l.size() + h` bytes the tag says made it.
            let moved = unsafe {
                if tag == MAPPED {
                    remap(base, l.size() + h, grown.size())
                } else {
                    let was = Layout::from_size_align_unchecked(l.size() + h, l.align());
                    System.realloc(base, was, grown.size())
                }
            };
            // SAFETY: `moved` is null or a block of `grown` bytes that kept its header.
            return unsafe { hand_out(moved, l.align(), tag) };
        }
        // Across the threshold: a new block, the bytes copied, the old one freed.
        // SAFETY: `to` is a valid layout of nonzero size; the two blocks are distinct and hold
        // at least the smaller size each.
        unsafe {
            let q = self.alloc(to);
            if !q.is_null() {
                std::ptr::copy_nonoverlapping(p, q, l.size().min(size));
                self.dealloc(p, l);
            }
            q
        }
    }
}

impl Pages {
    /// # Safety
    /// `l` has nonzero size (`GlobalAlloc::alloc`'s contract).
    unsafe fn make(&self, l: Layout, zeroed: bool) -> *mut u8 {
        if !large(&l) {
            // SAFETY: as the caller's contract.
            return unsafe {
                if zeroed {
                    System.alloc_zeroed(l)
                } else {
                    System.alloc(l)
                }
            };
        }
        let Some(whole) = with_head(l.size(), l.align()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `whole` has nonzero size; what comes back is null or a block of `whole`
        // bytes aligned to `l.align()` (mapped pages are aligned to the page, 4 KiB at least),
        // which `hand_out` tags.
        unsafe {
            if CAPPED.load(Relaxed) > 0 {
                if let Some(base) = map(whole.size()) {
                    // Fresh anonymous pages read as zero.
                    return hand_out(base, l.align(), MAPPED);
                }
            }
            let base = if zeroed {
                System.alloc_zeroed(whole)
            } else {
                System.alloc(whole)
            };
            hand_out(base, l.align(), SYSTEM)
        }
    }
}

#[cfg(target_os = "linux")]
fn map(size: usize) -> Option<*mut u8> {
    // SAFETY: an anonymous private mapping; no file, no fixed address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

#[cfg(not(target_os = "linux"))]
fn map(_size: usize) -> Option<*mut u8> {
    None
}

/// # Safety
/// `base` is a mapping of `size` bytes made by `map`.
#[cfg(target_os = "linux")]
unsafe fn unmap(base: *mut u8, size: usize) {
    // SAFETY: as the caller's contract.
    unsafe { libc::munmap(base.cast(), size) };
}

#[cfg(not(target_os = "linux"))]
unsafe fn unmap(_base: *mut u8, _size: usize) {
    unreachable!("no block is mapped where `map` maps none")
}

/// # Safety
/// `base` is a mapping of `from` bytes made by `map`.
#[cfg(target_os = "linux")]
unsafe fn remap(base: *mut u8, from: usize, to: usize) -> *mut u8 {
    // SAFETY: as the caller's contract; the kernel moves the mapping if it must.
    let q = unsafe { libc::mremap(base.cast(), from, to, libc::MREMAP_MAYMOVE) };
    if q == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        q.cast()
    }
}

#[cfg(not(target_os = "linux"))]
unsafe fn remap(_base: *mut u8, _from: usize, _to: usize) -> *mut u8 {
    unreachable!("no block is mapped where `map` maps none")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cap set for as long as it lives.
    struct Capped;
    impl Capped {
        fn set() -> Capped {
            cap_changed(0, 1);
            Capped
        }
    }
    impl Drop for Capped {
        fn drop(&mut self) {
            cap_changed(1, 0);
        }
    }

    /// Blocks made in either mode grow, shrink across the threshold and are freed in the
    /// other, keeping their bytes; zeroed ones read as zero; page alignment holds.
    #[test]
    fn blocks_keep_their_bytes_across_modes_and_the_threshold() {
        let a = Pages;
        for capped in [false, true] {
            for align in [8, 64, 4096] {
                let guard = capped.then(Capped::set);
                let l = Layout::from_size_align(OWN_PAGES_FROM + 100, align).unwrap();
                // SAFETY: nonzero layouts; each block is used within its size and freed with
                // the layout it has.
                unsafe {
                    let p = a.alloc_zeroed(l);
                    assert_eq!(p as usize % align, 0);
                    assert!(std::slice::from_raw_parts(p, l.size())
                        .iter()
                        .all(|&b| b == 0));
                    for i in 0..l.size() {
                        p.add(i).write(i as u8);
                    }
                    drop(guard);
                    let q = a.realloc(p, l, 3 * OWN_PAGES_FROM);
                    assert_eq!(q as usize % align, 0);
                    let grown = Layout::from_size_align(3 * OWN_PAGES_FROM, align).unwrap();
                    let _again = (!capped).then(Capped::set);
                    let r = a.realloc(q, grown, 1000);
                    assert!((0..1000).all(|i| r.add(i).read() == i as u8));
                    let small = Layout::from_size_align(1000, align).unwrap();
                    let s = a.realloc(r, small, OWN_PAGES_FROM * 2);
                    assert!((0..1000).all(|i| s.add(i).read() == i as u8));
                    a.dealloc(
                        s,
                        Layout::from_size_align(OWN_PAGES_FROM * 2, align).unwrap(),
                    );
                }
            }
        }
    }
}
