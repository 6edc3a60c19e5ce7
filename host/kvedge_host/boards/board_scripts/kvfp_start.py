# kvedge footprint: the largest block a run's arena can take, once the runner's entry module is imported
# (kvedge.model.run.main(kv_bytes=...) allocates it there); as small as the snippet that starts a run.
from kvedge.model import run
import gc
lo, hi = 0, gc.mem_free()
while lo < hi:
    mid = (lo + hi + 1) // 2
    try:
        b = bytearray(mid)
        b = None
        lo = mid
    except MemoryError:
        hi = mid - 1
    gc.collect()
print('KVFP start_largest %d' % lo)
