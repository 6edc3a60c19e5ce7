"""Quality of every cache strategy on a real checkpoint: perplexity, KL to the full f32 cache, top-1 agreement,
peak cache bytes.

Teacher-forces two kinds of text through a real kvedge KVCache per strategy (f32, f16, i8, i8 + f32 prefix, i4
and i2 KIVI with sliding residuals of one and two groups, i4/i2 with per-token keys, K and V in formats of their own
(k_dtype, v_dtype: planquality.SPLITS), window, sinks + window, H2O when kvedge has it): the written corpus
(tests/corpus: short children's stories written for this project, text the model never saw) and seeded texts
sampled from the model itself (temperature 1). Each kind is pooled over its texts. --forward float/int add the
device's own forward passes on int8 weights as rows.
--long adds a stream of 3x the trained context through a full cache, windows and sinks + windows,
with perplexity per context-length segment."""
import json
import os
import sys

from ..errors import UserError
from ..paths import model_file

DEFAULT_MODEL = model_file("stories260K.bin")
KINDS = ("written", "sampled")
WINDOWS = (64, 128, 256)


def add_arguments(p):
    p.add_argument("--model", default=DEFAULT_MODEL, help="llama2.c .bin checkpoint (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=0, help="length of the evaluated text (default: the model's "
                   "trained context)")
    p.add_argument("--seed", type=int, default=42, help="seed of the sampled text (default 42)")
    p.add_argument("--samples", type=int, default=3, help="sampled texts to pool (seeds SEED, SEED+1, ...; "
                   "default 3)")
    p.add_argument("--texts", choices=("both",) + KINDS, default="both",
                   help="which texts: the written corpus, texts sampled from the model, or both (default)")
    p.add_argument("--corpus", default=None, metavar="DIR",
                   help="folder of .txt stories (default: the repository's tests/corpus)")
    p.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="tokenizer of the written corpus (default: tok512.bin beside the model)")
    p.add_argument("--window", metavar="N[,N...]",
                   help="slots of the window / sinks+window / H2O rows, one or more sizes (default 64,128,256, "
                        "those that fit the text)")
    p.add_argument("--sinks", type=int, help="attention sinks (default 4, fewer when a window is shorter)")
    p.add_argument("--align", type=int, default=0, help="row alignment in bytes for every cache (default 0: "
                   "measure the formats, not the padding)")
    p.add_argument("--only", action="append", help="only strategies whose name contains this (f32 always runs)")
    p.add_argument("--long", action="store_true", help="also run the long-stream comparison (3x context)")
    p.add_argument("--contexts", type=int, default=3, help="long stream length in trained contexts (default 3)")
    p.add_argument("--forward", action="append", choices=("float", "int"), help="also a row for the device's own "
                   "forward pass of this kind on the model converted to int8 weights, with an i8 cache (repeat for "
                   "both; CPython, plain kernels: about a minute per 512 tokens each)")
    p.add_argument("--weights-dtype", action="append", choices=("i8", "i4"), help="the weights of the --forward "
                   "rows (repeat for both; default i8): int4 rows run on the integer pass only")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def _pct(x, base):
    return 100.0 * (x - base) / base


def table(res):
    rows = res["rows"]
    base = rows[0]["ppl"]
    lines = ["| strategy | perplexity | vs f32 | mean KL to f32 | top-1 agreement | peak cache bytes | "
             "arena bytes | flash bytes |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "missing" in r:
            lines.append("| %s | - | - | - | - | %s | - | - |" % (r["name"], r["missing"]))
            continue
        lines.append("| %s | %.4f | %+.2f %% | %.5f | %.1f %% | %s | %s | %s |" % (
            r["name"], r["ppl"], _pct(r["ppl"], base), r["kl"], 100 * r["top1"], format(r["peak_bytes"], ","),
            format(r["arena_bytes"], ","), format(r["flash_bytes"], ",") if "flash_bytes" in r else "-"))
    return "\n".join(lines)


def long_table(res):
    n = len(res["rows"][0]["segments"])
    ctx = res["context"]
    head = "| strategy | perplexity | " + " | ".join(
        "ppl tokens %d-%d" % (i * ctx, (i + 1) * ctx - 1) for i in range(n)) + " | peak cache bytes | flash bytes |"
    lines = [head, "|---|---:|" + "---:|" * n + "---:|---:|"]
    for r in res["rows"]:
        lines.append("| %s | %.4f | %s | %s | %s |" % (r["name"], r["ppl"], " | ".join(
            "%.4f" % s["ppl"] for s in r["segments"]), format(r["peak_bytes"], ","),
            format(r["flash_bytes"], ",") if "flash_bytes" in r else "-"))
    return "\n".join(lines)


MAX_SAMPLES = 256
MAX_CONTEXTS = 64


def check_args(args, cfg):
    """Every flag against the model before any text is sampled; fills in --window and --sinks defaults.
    Returns the text length. The text is sampled within the trained context (seq_len): --tokens beyond it
    would measure a model that never saw such positions (--long does that on purpose)."""
    from ..validate import flag_int
    tokens = flag_int("--tokens", args.tokens, 2, cfg.seq_len, "the model's seq_len") \
        if args.tokens else cfg.seq_len
    if tokens < 2:
        raise UserError("%s: the model's seq_len is %d: too short to evaluate" % (args.model, cfg.seq_len))
    flag_int("--samples", args.samples, 1, MAX_SAMPLES)
    flag_int("--contexts", args.contexts, 1, MAX_CONTEXTS)
    flag_int("--seed", args.seed, 1, (1 << 63) - args.samples)
    longest = max(tokens, args.contexts * cfg.seq_len if args.long else 0)
    if args.window is None:
        args.window = tuple(w for w in WINDOWS if w <= longest) or (longest,)
    else:
        try:
            args.window = tuple(int(x) for x in args.window.split(","))
        except ValueError:
            raise UserError("--window %s: expected sizes separated by commas" % args.window)
    for w in args.window:
        flag_int("--window", w, 1, longest, "the evaluated text's length")
    top = min(min(args.window), cfg.seq_len) if args.long else min(args.window)  # --long also runs seq_len
    if args.sinks is None:
        args.sinks = min(4, top - 1)
    flag_int("--sinks", args.sinks, 0, top - 1, "fewer than the window")
    from ..plan.account import check_align
    check_align("--align", args.align)
    return tokens


def _written(args, cfg, required):
    """[(name, ids)] of the written corpus, or None (with a note) when `--texts both` finds no tokenizer or a model
    whose context or vocabulary cannot take the stories."""
    from ..ref import quality
    folder = args.corpus or quality.CORPUS
    tok = args.tokenizer or os.path.join(os.path.dirname(os.path.abspath(args.model)), "tok512.bin")
    if not os.path.isdir(folder):
        raise UserError("%s: no such corpus folder" % folder)
    if not os.path.exists(tok):
        if not required and not args.tokenizer:
            print("note: %s is absent: the written corpus is skipped (give --tokenizer)" % tok, file=sys.stderr)
            return None
        raise UserError("%s: no tokenizer for the written corpus (give --tokenizer, or --texts sampled)" % tok)
    try:
        texts = quality.written_texts(tok, folder, cfg.vocab_size, cfg.seq_len)
    except quality.StoryError as e:  # names the story's file: the tokenizer is not at fault
        if not required:
            print("note: the written corpus is skipped: %s" % e, file=sys.stderr)
            return None
        raise UserError(str(e))
    except (ValueError, OSError) as e:
        if not required:  # another model than the corpus was written for: --texts both measures sampled text
            print("note: the written corpus is skipped: %s: %s" % (tok, e), file=sys.stderr)
            return None
        raise UserError("%s: %s" % (tok, e))
    return texts


def _headline(kind, res, args, names=None):
    if kind == "written":
        return ("written corpus: %d stories (%s), %s tokens, teacher-forced per cache strategy"
                % (res["samples"], ", ".join(names), format(res["text_tokens"], ",")))
    seeds = args.seed if args.samples == 1 else "%d..%d" % (args.seed, args.seed + args.samples - 1)
    return ("sampled: %d text%s of %d tokens sampled from the model (seed %s, temperature 1), teacher-forced per "
            "cache strategy" % (res["samples"], "s" if res["samples"] > 1 else "", res["tokens"], seeds))


def run(args):
    from ..ref import quality
    if not os.path.exists(args.model):
        raise UserError("%s: no such checkpoint (`kvedge fetch` downloads stories260K)" % args.model)
    from kvedge.model.header import read_config
    cfg, wd = read_config(args.model)  # the header checked, and the file's size against it
    if wd != "f32":
        raise UserError("%s: eval needs the f32 llama2.c checkpoint (int8 weights would blur the cache "
                        "comparison)" % args.model)
    tokens = check_args(args, cfg)
    if args.weights_dtype and "int" not in (args.forward or ()) and (
            "i4" in args.weights_dtype or not args.forward):
        raise UserError("--weights-dtype %s: rows of the device's passes need --forward int (int4 weights run on "
                        "the integer pass only)" % args.weights_dtype[0])
    from ..validate import finite_weights
    finite_weights(args.model, cfg, wd)
    kinds = KINDS if args.texts == "both" else (args.texts,)
    written = _written(args, cfg, args.texts == "written") if "written" in kinds else None
    if written is None:
        kinds = tuple(k for k in kinds if k != "written")
    quiet = args.json

    def progress(name):
        if not quiet:
            print("  running %s ..." % name, file=sys.stderr)
    from ..models import read_llama2c
    from ..plan.planquality import shape_of
    # the model's shape: a plan ranking by this table warns when it plans another (planquality.table_warning)
    out = {"model": os.path.basename(args.model), "shape": list(shape_of(read_llama2c(args.model))), "texts": {}}
    for kind in kinds:
        if not quiet:
            print("%s texts:" % kind, file=sys.stderr)
        texts = [ids for _, ids in written] if kind == "written" else None
        out["texts"][kind] = quality.evaluate(args.model, tokens, args.seed, args.window, args.sinks, args.only,
                                              args.align, progress, args.samples, texts,
                                              tuple(args.forward or ()), tuple(args.weights_dtype or ("i8",)))
    if written:
        out["texts"]["written"]["names"] = [n for n, _ in written]
    out["quality"] = out["texts"][kinds[0]]  # the table `kvedge plan --quality` reads: the written corpus first
    if args.long:
        out["long"] = quality.evaluate_long(args.model, args.contexts, args.seed, args.window + (cfg.seq_len,),
                                            args.sinks, args.align, progress, args.only)
    if args.json:
        print(json.dumps(out, sort_keys=True))
        return 0
    sys.stderr.flush()
    for i, kind in enumerate(kinds):
        res = out["texts"][kind]
        if i:
            print()
        print("%s: %s" % (out["model"], _headline(kind, res, args, res.get("names"))))
        print(table(res))
        fw = {(r["forward"], r.get("weights", "i8")): r["ppl"] for r in res["rows"] if r.get("forward")}
        if ("float", "i8") in fw and ("int", "i8") in fw:
            print("integer forward pass against the float one: perplexity %+.2f %%" % _pct(fw["int", "i8"],
                                                                                          fw["float", "i8"]))
        if ("int", "i8") in fw and ("int", "i4") in fw:
            print("int4 weights against int8 (integer pass): perplexity %+.2f %%" % _pct(fw["int", "i4"],
                                                                                      fw["int", "i8"]))
    if args.long:
        lr = out["long"]
        print()
        print("long stream: %d tokens (%d trained contexts of stories joined by BOS)" % (lr["tokens"],
                                                                                       args.contexts))
        print(long_table(lr))
    return 0
