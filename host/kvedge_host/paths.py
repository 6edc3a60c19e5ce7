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
SHARED_MODELS = os.path.join(os.path.dirname(ROOT), "shared", "models")


def venv_tool(name):
    """A console script installed beside the running Python (the venv), else on PATH, else None."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.exists(here):
        return here
    return shutil.which(name)
