#!/usr/bin/env python3
"""Write package.json at the repository root for `mpremote mip install` (every device/kvedge file, with its
path under the install target, URL relative to package.json, version = kvedge.__version__).

  tools/gen_package_json.py          # rewrite package.json
  tools/gen_package_json.py --check  # exit 1 if package.json is out of date"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]

from kvedge import __version__  # noqa: E402
from kvedge_host.deploy import device_sources  # noqa: E402


def build():
    urls = [[remote, "device/" + remote] for _, remote in device_sources()]
    return {"urls": urls, "deps": [], "version": __version__}


def text():
    # one file per line: easy to review in a diff
    b = build()
    rows = ",\n".join("    " + json.dumps(u) for u in b["urls"])
    return '{\n  "urls": [\n%s\n  ],\n  "deps": [],\n  "version": %s\n}\n' % (rows, json.dumps(b["version"]))


def main(argv):
    path = os.path.join(ROOT, "package.json")
    if "--check" in argv:
        try:
            with open(path) as f:
                current = f.read()
        except OSError:
            current = ""
        if current != text():
            print("package.json is out of date: run tools/gen_package_json.py")
            return 1
        return 0
    with open(path, "w") as f:
        f.write(text())
    print("wrote %s (%d files, version %s)" % (path, len(build()["urls"]), __version__))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
