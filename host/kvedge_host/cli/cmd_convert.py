"""Convert a model to the device's files: kvedge's int8 weight file (per-row scales, about 4x smaller than f32),
its int4 file (an f16 scale per group of 32 weights: 4.5 bits a weight, run by the integer forward pass) or
llama2.c's f32 file, and its tokenizer to llama2.c's tokenizer.bin.

MODEL is a llama2.c checkpoint (v0, or export.py's version 1 f32 / version 2 int8 Q8_0), a Hugging Face Llama
folder (config.json with LlamaForCausalLM, model.safetensors or its shards, tokenizer.json or tokenizer.model)
or a GGUF file of the llama architecture (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 tensors). Everything is
checked (the header, every tensor's presence, shape and type, the tokenizer) before a byte is written; the
int8 and int4 rows are written by kvedge.model.convert, the same code a board could run."""
import os

from ..errors import UserError

DTYPES = ("i8", "i4", "f32")


def add_arguments(p):
    p.add_argument("model", help="llama2.c .bin checkpoint (v0, v1, v2), Hugging Face Llama folder, or .gguf file")
    p.add_argument("-o", "--output", help="output file (default: MODEL with .i8.bin, .i4.bin or .f32.bin; for a "
                                          "folder, model.i8.bin in it)")
    p.add_argument("--weights-dtype", choices=DTYPES, default="i8",
                   help="i8: kvedge's int8 file (default); i4: its int4 file (groups of 32, f16 scales; the "
                        "integer forward pass runs it); f32: llama2.c's f32 file")
    p.add_argument("--tokenizer", help="the source's tokenizer (default: tokenizer.json or tokenizer.model in a "
                                       "Hugging Face folder, a GGUF file's own vocabulary)")
    p.add_argument("--tokenizer-out", help="where the device tokenizer goes (default: tokVOCAB.bin beside the "
                                           "output)")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")


def _default_out(model, dtype):
    ext = "." + dtype + ".bin"
    if os.path.isdir(model):
        return os.path.join(model, "model" + ext)
    base = model[:-4] if model.endswith(".bin") else model[:-5] if model.lower().endswith(".gguf") else model
    return base + ext


def _out_file(flag, path, model, force):
    from .. import validate
    if os.path.abspath(path) == os.path.abspath(model):
        raise UserError("output would overwrite the input")
    validate.out_folder(flag, path)
    if os.path.exists(path) and not force:
        raise UserError("%s exists (use --force to overwrite)" % path)
    return path


def run(args):
    from kvedge.model.header import file_size
    from .. import validate
    from ..readers import open_source, vocab, write
    from ..readers.llama2c import V0Source
    if not os.path.isdir(args.model):
        validate.in_file(args.model)
    src = open_source(args.model)  # the header and what the device cannot run refused here
    src.check()  # every tensor's presence, shape and type, from the file's tables
    if isinstance(src, V0Source):  # NaN or infinity cannot be quantized: refused before anything is written
        validate.finite_weights(args.model, src.cfg, "f32")
    out = _out_file("--output", args.output or _default_out(args.model, args.weights_dtype), args.model, args.force)
    tok_src = args.tokenizer or src.tokenizer_path
    voc = None
    if tok_src:
        validate.in_file(tok_src, "tokenizer")
        voc = vocab.read(tok_src).fit(tok_src, src.cfg.vocab_size)
        tok_out = args.tokenizer_out or os.path.join(os.path.dirname(os.path.abspath(out)),
                                                     "tok%d.bin" % src.cfg.vocab_size)
        _out_file("--tokenizer-out", tok_out, args.model, args.force)
    tmp, tmp32 = out + ".part", out + ".f32.part"
    try:
        if args.weights_dtype == "f32":
            n = write.write_f32(src, tmp)
        elif isinstance(src, V0Source):
            n = write.convert_f32(args.model, tmp, args.weights_dtype)
        else:
            n = write.write_quantized(src, tmp, tmp32, args.weights_dtype)
        os.replace(tmp, out)
    finally:
        for p in (tmp, tmp32):
            if os.path.exists(p):
                os.unlink(p)
    cfg = src.cfg
    for note in src.notes + (voc.notes if voc else []):
        print("note: " + note)
    if voc:
        vocab.write_bin(tok_out, voc)
        print("tokenizer: %s (%s, %d tokens) -> %s" % (tok_src, voc.kind, cfg.vocab_size, tok_out))
    else:
        print("no tokenizer with %s: weights only (give one with --tokenizer, or kvedge generate --tokenizer)"
              % args.model)
    src_bytes = file_size(args.model) if not os.path.isdir(args.model) else sum(
        os.path.getsize(os.path.join(args.model, f)) for f in os.listdir(args.model) if f.endswith(".safetensors"))
    what = {"i8": "int8 weights, one f32 scale per row", "i4": "int4 weights, one f16 scale per 32",
            "f32": "f32 weights, llama2.c's file"}[args.weights_dtype]
    print("%s -> %s: %s bytes -> %s bytes (%s; %s: dim %d, %d layers, %d heads, %d KV heads, vocab %d, context %d)"
          % (args.model, out, format(src_bytes, ","), format(n, ","), what, src.kind, cfg.dim, cfg.n_layers,
             cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size, cfg.seq_len))
    return 0
