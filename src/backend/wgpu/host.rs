//! Upload staging in host memory, made through the raw Vulkan device. wgpu gives its own
//! `MAP_WRITE` buffers the memory gpu-allocator prefers for uploads, which on a GPU whose BAR
//! exposes all of its memory is device memory: every store the host makes then crosses the
//! bus (about 9 GB/s on an H100). These buffers are host memory the host fills at its own
//! speed and the device pulls across with a copy, as CUDA's page-locked staging is.

use crate::error::{Error, Result};
use ash::vk;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use wgpu::hal::{api::Vulkan, vulkan};

/// One buffer of host memory that copies can read, mapped for its whole life (wgpu owns and
/// frees it with the buffer).
pub(super) struct HostBuffer {
    pub buf: wgpu::Buffer,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping belongs to this value alone; it is written only through `&mut self`.
unsafe impl Send for HostBuffer {}

impl HostBuffer {
    /// A `len`-byte buffer, or `None` where the device is not Vulkan or has no host memory
    /// type for it.
    fn new(device: &wgpu::Device, len: usize) -> Option<HostBuffer> {
        use vk::MemoryPropertyFlags as F;
        // SAFETY: the raw device creates, binds and maps one buffer, which is then handed
        // to wgpu whole (`from_raw_managed`: wgpu destroys it and frees its memory); every
        // handle made on the way is released on each failure path.
        unsafe {
            let hal = device.as_hal::<Vulkan>()?;
            let raw = hal.raw_device();
            let props = hal
                .shared_instance()
                .raw_instance()
                .get_physical_device_memory_properties(hal.raw_physical_device());
            let info = vk::BufferCreateInfo::default()
                .size(len as u64)
                .usage(vk::BufferUsageFlags::TRANSFER_SRC)
                .sharing_mode(vk::SharingMode::EXCLUSIVE);
            let buffer = raw.create_buffer(&info, None).ok()?;
            let req = raw.get_buffer_memory_requirements(buffer);
            let flags = |i: u32| props.memory_types[i as usize].property_flags;
            let types =
                || (0..props.memory_type_count).filter(|i| req.memory_type_bits >> i & 1 == 1);
            let host = F::HOST_VISIBLE | F::HOST_COHERENT;
            // Host-cached memory is host memory; failing that, coherent host-visible memory
            // that is not the device's own.
            let ty = types()
                .find(|&i| flags(i).contains(host | F::HOST_CACHED))
                .or_else(|| {
                    types()
                        .find(|&i| flags(i).contains(host) && !flags(i).contains(F::DEVICE_LOCAL))
                });
            let memory = ty.and_then(|ty| {
                let a = vk::MemoryAllocateInfo::default()
                    .allocation_size(req.size)
                    .memory_type_index(ty);
                raw.allocate_memory(&a, None).ok()
            });
            let Some(memory) = memory else {
                raw.destroy_buffer(buffer, None);
                return None;
            };
            let mapped = raw.bind_buffer_memory(buffer, memory, 0).and_then(|()| {
                raw.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
            });
            let Some(ptr) = mapped.ok().and_then(|p| NonNull::new(p.cast::<u8>())) else {
                raw.destroy_buffer(buffer, None);
                raw.free_memory(memory, None);
                return None;
            };
            let hb = vulkan::Buffer::from_raw_managed(buffer, memory, 0, req.size);
            drop(hal);
            let desc = wgpu::BufferDescriptor {
                label: Some("host staging"),
                size: len as u64,
                usage: wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            };
            let buf = device.create_buffer_from_hal::<Vulkan>(hb, &desc);
            Some(HostBuffer { buf, ptr, len })
        }
    }

    /// The buffer's memory. Only for a buffer no copy reads (one `HostPool::take` gave).
    pub fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `len` mapped bytes that this value owns; the pool hands a buffer out only
        // once the copies that read it are done.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// Buffers of `piece` bytes: free ones, and those that copies still read, oldest first.
pub(super) struct HostPool {
    piece: usize,
    free: Vec<HostBuffer>,
    busy: VecDeque<(HostBuffer, Arc<AtomicBool>)>,
}

/// Most buffers a pool makes: enough to stay a few pieces ahead of the device.
const MAX_BUFFERS: usize = 16;

impl HostPool {
    /// A pool of `piece`-byte buffers, or `None` where the device cannot make them.
    pub fn new(device: &wgpu::Device, piece: usize) -> Option<HostPool> {
        let first = HostBuffer::new(device, piece)?;
        Some(HostPool {
            piece,
            free: vec![first],
            busy: VecDeque::new(),
        })
    }

    /// A buffer no copy reads: a free one, a new one, or the oldest busy one once its copy
    /// is done.
    pub fn take(&mut self, device: &wgpu::Device) -> Result<HostBuffer> {
        loop {
            while self
                .busy
                .front()
                .is_some_and(|(_, d)| d.load(Ordering::Acquire))
            {
                let (b, _) = self.busy.pop_front().expect("checked");
                self.free.push(b);
            }
            if let Some(b) = self.free.pop() {
                return Ok(b);
            }
            if self.busy.len() < MAX_BUFFERS {
                if let Some(b) = HostBuffer::new(device, self.piece) {
                    return Ok(b);
                }
            }
            if self.busy.is_empty() {
                return Err(Error::OutOfMemory("WGPU: no host staging memory".into()));
            }
            device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| Error::Device(format!("WGPU: {e}")))?;
        }
    }

    /// Returns `b`, whose copy was just submitted on `queue`: free again once that is done.
    pub fn give(&mut self, queue: &wgpu::Queue, b: HostBuffer) {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        queue.on_submitted_work_done(move || d.store(true, Ordering::Release));
        self.busy.push_back((b, done));
    }
}
