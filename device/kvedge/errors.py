# Exceptions of the package. Every failing call leaves the object it was called on unchanged.


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
    """A tiered cache's cold store on flash cannot be trusted (foreign, another layout, cut mid-write, damaged):
    refused whole, never half-read."""
