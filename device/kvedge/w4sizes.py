# Sizes of kvedge's int4 weights (kvedge.model.w4file's layout): rows of GROUP columns a group, each group an f16
# scale and GROUP / 2 bytes of nibble codes, a row's last group zero-padded. A module of its own beside
# kvedge.sizes: a board running f32 or int8 weights does not compile it.
GROUP = 32


def groups(cols):
    """Groups of a row of `cols` int4 weights (the last one zero-padded)."""
    return (cols + GROUP - 1) // GROUP


def row_bytes(cols):
    """Bytes of one int4 row: per group an f16 scale and GROUP / 2 bytes of codes."""
    return groups(cols) * (2 + GROUP // 2)


def scale_bytes(rows, cols):
    """Bytes of a matrix's f16 group scales, padded to a multiple of 4 (its codes follow)."""
    return (2 * rows * groups(cols) + 3) & ~3


def matrix_bytes(rows, cols):
    """Bytes of an int4 matrix in the file: its scales (scale_bytes), then its codes (GROUP / 2 bytes a group)."""
    return scale_bytes(rows, cols) + rows * groups(cols) * (GROUP // 2)


def body_bytes(params):
    """Bytes of every int4 matrix (embedding and classifier included) of kvedge.sizes.llama_params(): exact from
    its "shape"; for a bare parameter count, every row a whole number of groups."""
    s = params.get("shape")
    if s is None:
        n = params["embedding"] + params["matrices"] + params["classifier"]
        return n // 2 + 2 * ((n + GROUP - 1) // GROUP)
    d, h, layers, q, kv, vocab, shared = s
    m = matrix_bytes
    return (2 - shared) * m(vocab, d) + layers * (m(q, d) + 2 * m(kv, d) + m(d, q) + 2 * m(h, d) + m(d, h))
