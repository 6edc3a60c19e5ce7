#!/usr/bin/env python3
"""Write the mip packages for `mpremote mip install` (version = kvedge.__version__, one file per line):
- package.json at the repository root: every device/kvedge file, with its path under the install target and its
  URL relative to package.json;
- device/kvedge-PART.json for each part of kvedge_host.boards.parts (core, kernels, attention, model, ...): the part's
  files and those of the parts it requires, URLs relative to device/.

  tools/gen_package_json.py          # rewrite them
  tools/gen_package_json.py --check  # exit 1 if one is out of date"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge import __version__  # noqa: E402
from kvedge_host.boards import parts  # noqa: E402
from kvedge_host.boards.deploy import device_sources  # noqa: E402


def build():
    urls = [[remote, "device/" + remote] for _, remote in device_sources()]
    return {"urls": urls, "deps": [], "version": __version__}


def render(b):
    """A package document with one file per line: easy to review in a diff."""
    rows = ",\n".join("    " + json.dumps(u) for u in b["urls"])
    return '{\n  "urls": [\n%s\n  ],\n  "deps": [],\n  "version": %s\n}\n' % (rows, json.dumps(b["version"]))


def text():
    return render(build())


def documents():
    """(path, text) of every package this writes."""
    out = [(os.path.join(ROOT, "package.json"), text())]
    return out + [(parts.package_path(n), render(parts.package(n, __version__))) for n in parts.PARTS]


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def main(argv):
    docs = documents()
    if "--check" in argv:
        stale = [os.path.relpath(p, ROOT) for p, t in docs if _read(p) != t]
        if stale:
            print("%s out of date: run tools/gen_package_json.py" % ", ".join(stale))
            return 1
        return 0
    for path, t in docs:
        with open(path, "w") as f:
            f.write(t)
        print("wrote %s (%d files, version %s)" % (os.path.relpath(path, ROOT), t.count('", "'), __version__))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
