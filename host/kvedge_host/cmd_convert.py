"""Convert a llama2.c f32 checkpoint to kvedge's int8 weight file (per-row scales), about 4x smaller.

The file is read and written one row at a time by kvedge.model.checkpoint.convert_to_i8, the same code a board
could run; the device runner loads it into RAM or streams it row block by row block."""
import os

from .cli import UserError


def add_arguments(p):
    p.add_argument("model", help="llama2.c .bin checkpoint (f32)")
    p.add_argument("-o", "--output", help="output file (default: MODEL with .i8.bin)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output file")


def run(args):
    from kvedge.model.checkpoint import convert_to_i8, file_size
    from kvedge.model.checkpoint import read_config
    from . import validate
    validate.in_file(args.model)
    out = args.output or (args.model[:-4] if args.model.endswith(".bin") else args.model) + ".i8.bin"
    if os.path.abspath(out) == os.path.abspath(args.model):
        raise UserError("output would overwrite the input")
    validate.out_folder("--output", out)
    if os.path.exists(out) and not args.force:
        raise UserError("%s exists (use --force to overwrite)" % out)
    cfg, wdtype = read_config(args.model)  # the header checked, and the file's size against it
    if wdtype == "f32":  # NaN or infinity cannot be quantized: refused here, before anything is written
        validate.finite_weights(args.model, cfg, wdtype)
    tmp = out + ".part"
    try:
        cfg, n = convert_to_i8(args.model, tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    src = file_size(args.model)
    print("%s -> %s: %s bytes -> %s bytes (int8 weights, one f32 scale per row; dim %d, %d layers, vocab %d)"
          % (args.model, out, format(src, ","), format(n, ","), cfg.dim, cfg.n_layers, cfg.vocab_size))
    return 0
