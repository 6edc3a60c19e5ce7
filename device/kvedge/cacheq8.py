"""KVCacheQ8: the KV cache the integer passes build (kvedge.caches.build), an i8 cache that also takes its rows as
int8 codes with f16 scale bits. Its methods' code is kvedge.q8rows' (which a run writing floats never loads):

  store_q8(layer, codes, scales, slot=-1)   the decode interface's int8 write, from the buffers bind_q8() checked
  attend_q8(layer, qc, qs, oq, oe, span=-1)   the decode interface's integer attention
  bind_query(qc, qs, oq, oe)   attend_q8's buffers, checked once
  q8_fits(layer, qs)   whether a query is within the integer step's range (kvedge.attention.Q8_RANGE)
  bind_q8(p, kc, vc, ks, vs, codes, scales, q_store, qc, qs, oq, oe)   the integer pass's buffers, checked once
  q8_store_block(p, ...), write_q8_at(layer, codes, scales, slot, p, store)   a caller's block of codes

Everything else (the arena, positions, float writes, reads, the checked write_q8 of one token's codes, attend,
quiet, reset) is KVCache's."""
from .cache import KVCache
from . import q8rows


class KVCacheQ8(KVCache):
    _qc = _qs = _oq = _oe = None  # attend_q8()'s buffers, once bind_query() checked them
    _sp = _q_store = None  # store_q8()'s block and kernel, once bind_q8() bound them
    store_q8 = q8rows.store_q8
    bind_query = q8rows.bind_query
    attend_q8 = q8rows.attend_q8
    q8_fits = q8rows.q8_fits
    bind_q8 = q8rows.bind_q8
    q8_store_block = q8rows.q8_store_block
    write_q8_at = q8rows.write_q8_at
