"""The model runner's buffers, the formulas the runner and `kvedge plan` share: RAM for weights that stay on flash
and are read a chunk of rows at a time (kvedge.model.checkpoint with stream=True), and the float pass's scratch
(kvedge.model.pass_float). Its own module: a run of the integer pass from RAM or ROMFS does not load it."""
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


def acc_rows(cfg, stream=False):
    """Rows of int32 sums a float-pass matvec of int8 weights needs at once: the tallest matrix, or with weights
    streamed from flash one chunk of rows (each chunk is scaled out before the next is read)."""
    if stream and stream != "rom":  # rows read in place from ROMFS are summed all at once
        buf = stream_buffer_bytes(cfg.dim, cfg.hidden_dim, I8)
        return stream_scale_slots(cfg.dim, cfg.hidden_dim, I8, buf)
    return max(cfg.dim, cfg.hidden_dim, cfg.vocab_size)


def float_scratch_bytes(cfg, wdtype, stream=False):
    """The float pass's buffers beyond kvedge.budget.activation_bytes: K and V of the current token (kv_dim f32
    each), RoPE frequencies and this position's cos/sin (head_dim/2 f32 each), and for int8 weights the int8 codes
    of a matvec input (the widest input) and its int32 row sums (acc_rows); the integer attention path's query
    codes, scales and output (counted always: a few hundred bytes)."""
    n = 2 * cfg.kv_dim * 4 + 3 * (cfg.head_dim // 2) * 4
    n += cfg.dim + 2 * cfg.n_heads + 4 * cfg.dim + 4 * cfg.n_heads  # integer attention: query codes, output
    if wdtype == I8:
        n += max(cfg.dim, cfg.hidden_dim) + 4 * acc_rows(cfg, stream)
    return n
