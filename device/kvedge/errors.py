# Exceptions of the package. Every failing call leaves the object it was called on unchanged: each public
# method of KVCache, Attention, H2O, PagedPool, Stream, ColdTier and TieredCache checks all of its inputs
# (kvedge.check) before it touches the arena, a table, a counter, an LRU tick, a score or a file on flash.
# What a refusal raises, and nothing else:
#   TypeError       an argument of the wrong kind: not an int where an index, id or code is meant (bool counts
#                   as an int, as in Python's own indexing), not a real number where a value is meant (complex,
#                   str, None), not a sequence, or a buffer that cannot hold the results (e.g. array('B') for
#                   signed codes, a tuple for an output, array('h') where the integer kernels need array('i')).
#   ValueError      the right kind but an unusable value: wrong length, NaN or inf, a value outside the storage
#                   type's range (float32 for f32 rows, +-65504 for f16/i4, 127 * 65504 for i8 rows), an int8
#                   code outside -128..127, f16 scale bits outside 0..0x7BFF (0x7C00 = inf/NaN), or a call in
#                   the wrong state (no current token, nothing to attend to, a closed tier or tiered cache).
#   IndexError      an index out of range: layer, KV head, query head, slot, position, record, handle.
#   KeyError        a session id that is not open (closed, reclaimed, never opened).
#   CacheFullError  no room and nothing may be evicted (counted in alloc_failures / appends_failed, the one
#                   documented change a refusal makes); BudgetError: a configuration over its byte budget.
#   OSError         the file system under a cold tier or cold store failed.
#   ColdStoreError  reopening a cold tier or cold store that is damaged, truncated, foreign or for another layout;
#                   its SessionError: loading a saved session (kvedge.session) of that kind, the cache unchanged.
#   CheckpointError (a ValueError) a model file that is malformed (kvedge.model.header).
#   PlanError       (a ValueError) a plan document a runner must not run (kvedge.model.plandoc), field named first.


class KVEdgeError(Exception):
    """Base class of kvedge's own errors."""


class BudgetError(MemoryError):
    """A configuration needs more bytes than its budget allows (raised before allocating)."""

    def __init__(self, what, need, budget):
        super().__init__("%s needs %d bytes, budget is %d bytes (over by %d)" % (
            what, need, budget, need - budget))
        self.need = need
        self.budget = budget


class CacheFullError(KVEdgeError):
    """Appending would pass the cache's hard token cap and there is no window to evict into."""


class ColdStoreError(KVEdgeError):
    """A store on flash (a tiered cache's cold store, a paged pool's cold tier: kvedge.tier.store) cannot be
    trusted (foreign, another kind or layout, truncated, cut mid-write, damaged): refused whole, never half-read,
    never repaired."""


class SessionError(ColdStoreError):
    """A saved session (kvedge.session) that must not be loaded (foreign, another layout, truncated with no earlier
    save, damaged): refused whole before the cache changes, the file and the part named."""


class CheckpointError(ValueError):
    """A model file is malformed: wrong magic, impossible header, wrong length (kvedge.model.header, and
    kvedge.model.w4file for an int4 file's own header)."""


class PlanError(ValueError):
    """A `kvedge plan --out` document a runner must not run (unknown format or kind, a field of the wrong type or
    out of range, NaN/inf, a budget beyond this runtime's heap, or a model file it was not made for): refused by
    kvedge.model.plandoc before anything is allocated. The message starts with the field's name."""
