"""Where things are: the repository's folders and the tools installed beside this Python."""
import os
import shutil
import sys

HOST_PKG = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HOST_PKG))
DEVICE = os.path.join(ROOT, "device")
DEVICE_PKG = os.path.join(DEVICE, "kvedge")
BOARDS = os.path.join(ROOT, "boards")
TESTS_DEVICE = os.path.join(ROOT, "tests", "device")
TOOLS = os.path.join(ROOT, "tools")
WASM = os.path.join(TOOLS, "wasm")
# ../shared beside the repository: the real model and the board-like runtimes (a user's clone has none).
# KVEDGE_SHARED points elsewhere (a git worktree's parent has no shared/; an empty folder hides it).
SHARED = os.path.abspath(os.environ.get("KVEDGE_SHARED") or os.path.join(os.path.dirname(ROOT), "shared"))
SHARED_RUNTIMES = os.path.join(SHARED, "runtimes")


def cache_models():
    """The folder `kvedge fetch` keeps the downloaded models in: $XDG_CACHE_HOME/kvedge/models, else
    ~/.cache/kvedge/models."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "kvedge", "models")


# the tokenizers `kvedge fetch` downloads, by the vocabulary each holds (the planner counts the one a model's
# vocabulary takes when it finds no other)
TOKENIZER_VOCAB = {"tok512.bin": 512, "tokenizer.bin": 32000}


def model_file(name):
    """Where a real model file (stories260K.bin, tok512.bin, stories15M.bin, tokenizer.bin) is: ../shared/models
    when it holds it, else the cache `kvedge fetch` fills when that does, else the ../shared/models path (which the
    callers' "is absent" messages name). The one lookup demo, generate, eval, the tools and the tests use."""
    shared = os.path.join(SHARED, "models", name)
    if os.path.exists(shared):
        return shared
    cached = os.path.join(cache_models(), name)
    return cached if os.path.exists(cached) else shared


# The folder the real stories260K and its tok512.bin are found in (model_file's answer, for the callers that
# join names to a folder).
SHARED_MODELS = os.path.dirname(model_file("stories260K.bin"))


def venv_tool(name):
    """A console script installed beside the running Python (the venv), else on PATH, else None."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.exists(here):
        return here
    return shutil.which(name)
