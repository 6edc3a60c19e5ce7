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


def pool_meta_bytes(sessions, n_blocks, block, session_blocks=0):
    """RAM of a PagedPool's bookkeeping beside its arena: the block tables (sessions x session_blocks, default every
    block), five int arrays and two byte arrays a session, a block's holder count and free-stack entry, and the slot
    list of one attention step (session_blocks x block ints)."""
    mb = session_blocks or n_blocks
    return 4 * (sessions * mb + 5 * sessions + mb * block) + 2 * sessions + 2 * 2 * n_blocks


def pool_bytes(layers, kv_heads, head_dim, block, dtype, align, sessions, tokens, shared=0):
    """A PagedPool sized for `sessions` conversations of `tokens` tokens each whose first `shared` tokens are a
    prompt held once (one more session holds it, the conversations are its forks; 0: nothing shared), as a dict:
    blocks, arena (blocks x pool_block_bytes), meta (pool_meta_bytes; each session capped at its tokens' blocks),
    total, handles (the sessions open at once)."""
    check_int("tokens", tokens, 1)
    check_int("shared", shared, 0)
    if shared > tokens:
        raise ValueError("shared (%d) must be at most tokens (%d)" % (shared, tokens))
    blocks = pool_shared_blocks(sessions, shared, tokens - shared, block, shared > 0)
    handles = sessions + (1 if shared else 0)
    arena = blocks * pool_block_bytes(layers, kv_heads, head_dim, block, dtype, align)
    meta = pool_meta_bytes(handles, blocks, block, min(blocks, (tokens + block - 1) // block))
    return {"blocks": blocks, "arena": arena, "meta": meta, "total": arena + meta, "handles": handles}
