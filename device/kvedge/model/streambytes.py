"""RAM for weights that stay on flash and are read a chunk of rows at a time (kvedge.model.checkpoint with
stream=True): the formulas the runner and `kvedge plan` share. Its own module: only runs that stream load it."""
from kvedge.sizes import F32, F16, I8, I4, WEIGHT_DTYPES, check_dtype

STREAM_ROWS = 8  # rows of the widest matrix read per chunk when weights stay on flash (amortizes a seek)


def _weight_item(dtype):
    # bytes per weight in a row buffer (int4 rows: kvedge.w4sizes.row_bytes)
    return {F32: 4, F16: 2, I8: 1}[dtype]


def stream_buffer_bytes(dim, hidden_dim, dtype=F32, rows=STREAM_ROWS):
    """The row buffer of weights read from flash: `rows` rows of the widest matrix (input dim or hidden_dim);
    int4 rows with their group scales (kvedge.w4sizes.row_bytes) and the padding between the chunk's scales and
    its codes."""
    check_dtype(dtype, WEIGHT_DTYPES, "weights dtype")
    n = max(dim, hidden_dim)
    if dtype == I4:
        from kvedge.w4sizes import row_bytes
        return rows * row_bytes(n) + 4
    return rows * n * _weight_item(dtype)


def stream_scale_slots(dim, hidden_dim, dtype, buffer_bytes):
    """Per-row scales read beside a chunk of quantized rows: as many as the buffer holds rows of the narrowest
    matrix (0 for float weights, which carry no scales, and for int4 rows, whose group scales are in the row
    buffer)."""
    if dtype in (F32, F16, I4):
        return 0
    return buffer_bytes // min(dim, hidden_dim)


def weights_stream_bytes(params, dim, hidden_dim, dtype=F32, buffer_bytes=0, scale_bytes=4, norms=False):
    """RAM for weights that stay on flash and are read a chunk of rows at a time (kvedge.model.checkpoint with
    stream=True): one f32 norm vector (each norm is read from the file when it is applied: dim floats, where all
    of them were 2 * layers + 1 times that), the row buffer (default stream_buffer_bytes) and, for quantized
    weights, the chunk's per-row scales. Nothing else of the matrices is held. norms=True: every norm in RAM
    (the integer and ulab forward passes keep theirs)."""
    buf = buffer_bytes or stream_buffer_bytes(dim, hidden_dim, dtype)
    return 4 * (params["norms"] if norms else dim) + buf + scale_bytes * stream_scale_slots(dim, hidden_dim, dtype,
                                                                                              buf)
