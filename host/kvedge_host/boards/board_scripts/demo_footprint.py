# kvedge demo (kvedge_host.cli.cmd_demo): the heap the runner's modules a generation imports take on the board, and
# the kernels it chose: KVFOOTPRINT CODE_BYTES FREE KIND (measured there, not guessed).
import gc
gc.collect()
f0 = gc.mem_free()
import kvedge.model.run, kvedge.model.llama, kvedge.model.tokenizer, kvedge.model.sampler, kvedge.model.checkpoint
import kvedge.cache, kvedge.attention, kvedge.telemetry, kvedge.evict
from kvedge import kernels
kernels.get()
gc.collect()
print('KVFOOTPRINT %d %d %s' % (f0 - gc.mem_free(), gc.mem_free(), kernels.kind()))
