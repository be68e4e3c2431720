"""Host-side transfer rates on a GPU machine (notes/perf-cuda.md, "Achieved rates"): pageable to
page-locked memory on all threads and on one, page-locked and pageable memory to the device,
and registering pageable memory in place. 512 MB of float32, best of a few runs.
Usage: python3 notes/scripts/host_rates.py  (needs PyTorch with CUDA)"""
import time, torch

n = 128 << 20  # 512 MB of float32
x = torch.randn(n)  # pageable, touched
def t(f, rep=3):
    best = 1e9
    for _ in range(rep):
        torch.cuda.synchronize(); s = time.perf_counter(); f(); torch.cuda.synchronize(); best = min(best, time.perf_counter() - s)
    return best
threads = torch.get_num_threads()
print("torch threads", threads)
p = torch.empty(n, pin_memory=True)
d = torch.empty(n, device="cuda")
print("fill pinned (torch copy_, %d threads): %.1f GB/s" % (threads, 2.0**29 / t(lambda: p.copy_(x)) / 1e9))
torch.set_num_threads(1)
print("fill pinned (1 thread): %.1f GB/s" % (2.0**29 / t(lambda: p.copy_(x)) / 1e9))
torch.set_num_threads(threads)
print("DMA pinned -> device, 512 MB: %.1f GB/s" % (2.0**29 / t(lambda: d.copy_(p, non_blocking=True)) / 1e9))
ps, ds = p[: 8 << 20], d[: 8 << 20]
print("DMA pinned -> device, 32 MB: %.1f GB/s" % (2.0**25 / t(lambda: ds.copy_(ps, non_blocking=True), 10) / 1e9))
print("pageable -> device, 512 MB: %.1f GB/s" % (2.0**29 / t(lambda: d.copy_(x)) / 1e9))
# Both at once, as a pipelined upload runs them: one buffer filled while another crosses the bus.
p2 = torch.empty(n, pin_memory=True)
both = t(lambda: (d.copy_(p2, non_blocking=True), p.copy_(x)))
print("fill 512 MB beside a 512 MB DMA: %.1f ms for both (%.1f GB/s each)" % (both * 1e3, 2.0**29 / both / 1e9))
cr = torch.cuda.cudart()
for r in range(2):
    y = torch.randn(n)
    s = time.perf_counter(); rc = cr.cudaHostRegister(y.data_ptr(), y.numel() * 4, 0); reg = time.perf_counter() - s
    dma = t(lambda: d.copy_(y, non_blocking=True), 1)
    s = time.perf_counter(); cr.cudaHostUnregister(y.data_ptr()); un = time.perf_counter() - s
    print("register 512 MB: %.1f ms (rc %s), DMA %.1f ms (%.1f GB/s), unregister %.1f ms" % (reg * 1e3, rc, dma * 1e3, 2.0**29 / dma / 1e9, un * 1e3))
