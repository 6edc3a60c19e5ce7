# kvedge.kernels picks its inner loops without importing the kinds it does not use: every kind's code costs
# heap on a board (the viper module alone ~24 KB on Thumb), so "auto" stops at the first kind that loads.
import sys

from kvedge import kernels


def _forget_kinds():
    for kind in kernels.ALLOWED:
        sys.modules.pop(kernels.module_name("", kind), None)
    kernels._current = None
    kernels._kind = None


def _kinds_loaded():
    return sorted(k for k in kernels.ALLOWED if kernels.module_name("", k) in sys.modules)


def test_auto_imports_only_what_the_kind_it_picks_needs():
    before = kernels.kind()
    try:
        _forget_kinds()
        kernels.select()
        chosen, loaded = kernels.kind(), _kinds_loaded()
        _forget_kinds()
        __import__(kernels.module_name("", chosen))   # the reference: that kind's module alone (viper uses native's
        assert loaded == _kinds_loaded(), (chosen, loaded)   # float loops) and nothing else
    finally:
        kernels.select(before)


def test_an_unknown_kind_is_refused_with_what_is_available():
    try:
        kernels.select("sse")
    except ValueError as e:
        assert "'sse'" in str(e) and "plain" in str(e)
    else:
        assert False, "select('sse') did not raise"
    assert kernels.kind() in kernels.ALLOWED
