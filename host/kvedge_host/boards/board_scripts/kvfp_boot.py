# kvedge footprint: the heap allocated before kvedge is imported, and the usable heap (KVFP boot ALLOC USABLE).
# kvedge_host.boards.footprint.boot_code appends a runner call as long as a plan's, in a branch that never runs.
import gc
gc.collect()
print('KVFP boot %d %d' % (gc.mem_alloc(), gc.mem_free() + gc.mem_alloc()))
