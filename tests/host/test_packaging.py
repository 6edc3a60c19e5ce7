"""pip install ships only the packages pyproject.toml lists (setuptools' `packages`, not a search): every folder
of device/kvedge and host/kvedge_host with an __init__.py must be listed, or an installed kvedge lacks it (the
wheel had neither kvedge.model nor kvedge_host.readers when only the two top packages were listed)."""
import os
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _setuptools():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def _packages_on_disk(package_dir):
    out = set()
    for pkg, d in package_dir.items():
        top = os.path.join(ROOT, d)
        for sub, subdirs, files in os.walk(top):
            subdirs[:] = [s for s in subdirs if s != "__pycache__"]
            if "__init__.py" in files:
                rel = os.path.relpath(sub, top)
                out.add(pkg if rel == "." else pkg + "." + rel.replace(os.sep, "."))
    return out


def test_every_package_folder_is_listed():
    tool = _setuptools()
    want = _packages_on_disk(tool["package-dir"])
    assert {"kvedge", "kvedge.model", "kvedge_host", "kvedge_host.readers"} <= want  # the walk found them
    assert sorted(tool["packages"]) == sorted(want)
