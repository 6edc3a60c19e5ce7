"""Board profiles from boards/*.json."""
import json
import os

from .paths import BOARDS


class BoardError(ValueError):
    pass


def names():
    return sorted(f[:-5] for f in os.listdir(BOARDS) if f.endswith(".json"))


def load(name):
    path = os.path.join(BOARDS, name + ".json")
    if not os.path.exists(path):
        raise BoardError("unknown board %r (known: %s)" % (name, ", ".join(names())))
    try:
        with open(path) as f:
            prof = json.load(f)
    except (OSError, ValueError) as e:
        raise BoardError("%s: cannot read board profile: %s" % (path, e))
    for key in ("heap_bytes", "mpy_march", "fast_memory"):
        if key not in prof:
            raise BoardError("%s: board profile is missing %r" % (path, key))
    return prof
