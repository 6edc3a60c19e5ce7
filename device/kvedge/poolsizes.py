# The blocks of a PagedPool (kvedge.paged) and what sessions sharing a prompt hold of them: formulas small enough
# for a board's heap beside the model (kvedge.budget re-exports them for the host).
from .sizes import I8, LOWBIT, META_BYTES, align_up, check_int, row_bytes


def pool_block_bytes(layers, kv_heads, head_dim, block, dtype, align):
    """Arena bytes of one block of a PagedPool (kvedge.paged): `block` tokens' padded K and V rows of every layer and
    KV head, with their scales (i8: an f16 each; i4/i2 without residual: scale and zero)."""
    row = align_up(row_bytes(head_dim, dtype), align)
    meta = META_BYTES if dtype == I8 else (2 * META_BYTES if dtype in LOWBIT else 0)
    return 2 * layers * kv_heads * block * (row + meta)


def pool_shared_blocks(sessions, prefix, own, block, shared=True):
    """Blocks a PagedPool holds for `sessions` conversations that each start with the same `prefix` tokens and add
    `own` tokens of their own. shared: one session holds the prefix and the others are its forks (kvedge.paged:
    the prefix's blocks held once; a fork's first write into a part-filled shared block copies it), so the
    prefix's ceil(prefix/block) blocks count once and each conversation its blocks past the prefix's whole ones
    (none before it writes); else each conversation holds a copy: ceil((prefix + own)/block) each."""
    for name, v in (("sessions", sessions), ("block", block)):
        check_int(name, v, 1)
    for name, v in (("prefix", prefix), ("own", own)):
        check_int(name, v, 0)
    each = (prefix + own + block - 1) // block
    if not shared:
        return sessions * each
    return (prefix + block - 1) // block + (sessions * (each - prefix // block) if own else 0)
