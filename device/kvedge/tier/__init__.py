# The flash tier: kvedge's one flash format (store: append-only, checksummed blocks under two headers), the
# tiered cache of one sequence on it (cache: a hot ring in RAM, older tokens in blocks), the paged pool's spill
# (spill: ColdTier), the tier's fields (config) and its exact sizes (sizes). Import the module you need.
