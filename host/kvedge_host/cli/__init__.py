"""The `kvedge` command. Each subcommand lives in its own module `kvedge_host.cli.cmd_<name>` with
`add_arguments(parser)` and `run(args) -> exit status`. Bad input ends in one line on stderr, exit 2."""
import argparse
import importlib
import sys

from kvedge import __version__

# name -> one-line help; the module kvedge_host.cli.cmd_<name> implements it
COMMANDS = {
    "budget": "memory account of a model on a board: weights, KV cache, activations, longest context",
    "plan": "compress until it fits: ranked feasible cache configurations and a device config JSON",
    "footprint": "measure the runtime's own heap on the emulated 32-bit board (what plan counts)",
    "boards": "list the board profiles and where their figures come from",
    "check": "run seeded attention (and model) cases on a runtime and compare with numpy",
    "sim": "a virtual board: MicroPython on an emulated Cortex-M3 (or the unix port) behind a serial port",
    "deploy": "copy the device package (optionally as .mpy) to a board through mpremote",
    "monitor": "live view of a board's stats stream, with CSV logging and alerts",
    "test": "run the device test suite on a board or a virtual board",
    "convert": "convert a llama2.c, Hugging Face Llama or GGUF model (and its tokenizer) to the device's files",
    "generate": "generate text with a llama2.c checkpoint on a chosen runtime",
    "chat": "turns typed on stdin, each fed on top of one cache: a turn costs its own tokens, not the history's",
    "eval": "quality of every cache strategy on a real checkpoint",
    "demo": "the whole story on a virtual board: plan, deploy, generate, monitor",
    "fetch": "download the real stories models (stories260K and its tokenizer) from the Hugging Face Hub",
}


from ..errors import UserError  # noqa: F401 (the commands' error, raised below the CLI too)


def _load(name):
    try:
        return importlib.import_module("kvedge_host.cli.cmd_" + name)
    except ModuleNotFoundError as e:
        if e.name == "kvedge_host.cli.cmd_" + name:
            return None
        raise


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit status 2."""

    def error(self, message):
        print("%s: error: %s" % (self.prog, message), file=sys.stderr)
        sys.exit(2)


def description(doc):
    """A command's --help description: the first paragraph of its module docstring, whole (argparse re-wraps it;
    the paragraph's first line alone ends mid-sentence wherever the docstring wraps)."""
    para = doc.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines())


def build_parser():
    ap = _Parser(prog="kvedge", description="KV-cache planning and management for microcontrollers")
    ap.add_argument("--version", action="version", version="kvedge " + __version__)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_ in COMMANDS.items():
        mod = _load(name)
        if mod is None:
            continue
        p = sub.add_parser(name, help=help_, description=description(mod.__doc__ or help_))
        mod.add_arguments(p)
        p.set_defaults(_mod=mod)
    return ap


def main(argv=None, parser=None):
    """Run one command; returns its exit status. `parser` (from build_parser()) may be reused across calls by
    a caller that runs many commands in one process (the CLI fuzzer): building one costs ~15 ms."""
    ap = parser or build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "_mod", None):
        ap.print_help()
        return 2
    empty = _empty_value(args)
    if empty:
        print("kvedge %s: error: %s: an empty value" % (args.command, empty), file=sys.stderr)
        return 2
    try:
        return args._mod.run(args) or 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1
    except (UserError, ValueError, OSError, MemoryError) as e:
        print("kvedge %s: error: %s" % (args.command, _one_line(e)), file=sys.stderr)
        return 2
    except RuntimeError as e:
        from ..boards.runtimes import RuntimeMissing  # a runtime the command needs is not installed: say which
        if not isinstance(e, RuntimeMissing):
            raise
        print("kvedge %s: error: %s" % (args.command, _one_line(e)), file=sys.stderr)
        return 2


_MAY_BE_EMPTY = ("prompt", "only")  # text, not names: "" is a value (an empty prompt, a filter matching all)


def _empty_value(args):
    """The flag given an empty string where a file, a board or a name is expected (argparse takes "" as a
    value, and commands would read it as "not given"), or None."""
    for name, v in sorted(vars(args).items()):
        if v == "" and name not in _MAY_BE_EMPTY and not name.startswith("_"):
            return ("--" + name.replace("_", "-")) if name != "model" or args.command != "convert" else "MODEL"
    return None


def _one_line(e):
    """The first line of an error's message; an OSError from the system names its file first, as ours do."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        msg = "%s: %s" % (e.filename, e.strerror)
    else:
        msg = str(e) or type(e).__name__
    return (msg.strip().splitlines() or [type(e).__name__])[0]
