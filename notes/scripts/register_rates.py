"""Registering pageable memory in place (cudaHostRegister) against filling page-locked buffers,
for host-input encoding (notes/perf-cuda.md, encoding version 13): registers 1.5 GB in 32 MB
chunks on 1-16 threads, copies each registered chunk to the device, unregisters; then a pipeline
that registers ahead on threads while the main thread copies; then the staged way (3 page-locked
32 MB buffers, fill then copy). Usage: python3 notes/scripts/register_rates.py  (PyTorch with CUDA)"""
import ctypes, glob, os, time, torch
from concurrent.futures import ThreadPoolExecutor

top = os.path.dirname(torch.__file__)
libs = glob.glob(os.path.join(top, "lib", "libcudart*.so*")) + \
    glob.glob(os.path.join(top, "..", "nvidia", "*", "lib", "libcudart.so*"))
rt = ctypes.CDLL(libs[0])
rt.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
rt.cudaHostUnregister.argtypes = [ctypes.c_void_p]
n, CH = 384 << 20, 8 << 20  # 1.5 GB of float32, 32 MB chunks
y = torch.randn(n)
d = torch.empty(n, device="cuda")
# Chunks start on page boundaries: registrations round to whole pages and may not overlap.
off = (-y.data_ptr() % 4096) // 4
y = y[off:]
base, nch = y.data_ptr(), (n - 1024) // CH
size = nch * CH * 4
def reg(i): return rt.cudaHostRegister(base + i * CH * 4, CH * 4, 0)
def unreg(i): return rt.cudaHostUnregister(base + i * CH * 4)
def sync(): torch.cuda.synchronize()
def copy(i): d[i * CH:(i + 1) * CH].copy_(y[i * CH:(i + 1) * CH], non_blocking=True)
for T in [1, 4, 8, 16]:
    with ThreadPoolExecutor(T) as ex:
        s = time.perf_counter(); rcs = set(ex.map(reg, range(nch))); r = time.perf_counter() - s
        sync(); s = time.perf_counter()
        for i in range(nch): copy(i)
        sync(); dma = time.perf_counter() - s
        s = time.perf_counter(); list(ex.map(unreg, range(nch))); u = time.perf_counter() - s
    print("%2d threads: register %.1f ms (status %s), copy %.1f ms (%.1f GB/s), unregister %.1f ms"
          % (T, r * 1e3, rcs, dma * 1e3, size / dma / 1e9, u * 1e3))
for T in [4, 8, 16]:
    sync(); s = time.perf_counter()
    with ThreadPoolExecutor(T) as ex:
        futs = [ex.submit(reg, i) for i in range(nch)]
        for i in range(nch):
            futs[i].result(); copy(i)
        sync(); list(ex.map(unreg, range(nch)))
    t = time.perf_counter() - s
    print("register ahead on %2d threads, copy each: %.1f ms (%.1f GB/s)" % (T, t * 1e3, size / t / 1e9))
pins = [torch.empty(CH, pin_memory=True) for _ in range(3)]
best = 1e9
for _ in range(3):
    evs = [None] * 3
    sync(); s = time.perf_counter()
    for i in range(nch):
        b = i % 3
        if evs[b] is not None: evs[b].synchronize()
        pins[b].copy_(y[i * CH:(i + 1) * CH])
        d[i * CH:(i + 1) * CH].copy_(pins[b], non_blocking=True)
        evs[b] = torch.cuda.Event(); evs[b].record()
    sync(); best = min(best, time.perf_counter() - s)
print("staged, 3 page-locked buffers: %.1f ms (%.1f GB/s, %.1f ms per 1M x 384 rows)"
      % (best * 1e3, size / best / 1e9, best * 1e3 * 1e6 * 384 / (nch * CH)))
