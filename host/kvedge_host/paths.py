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
SHARED_MODELS = os.path.join(SHARED, "models")
SHARED_RUNTIMES = os.path.join(SHARED, "runtimes")


def venv_tool(name):
    """A console script installed beside the running Python (the venv), else on PATH, else None."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.exists(here):
        return here
    return shutil.which(name)
