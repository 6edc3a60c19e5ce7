# The field checks of a plan document (kvedge.model.plandoc): each refusal a PlanError whose message starts with the
# field's name. Apart from plandoc so that a pool plan's own check (kvedge.model.runpool) uses them too.
from kvedge.compat import isfinite
from kvedge.errors import PlanError

MAX_BYTES = 1 << 30  # no byte figure of a plan comes near it (the largest profile's heap is 8 MiB)
MAX_DEPTH = 12  # JSON nesting a plan may have (placement rows and measured figures are 4 deep)


def _show(x):
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


def _bad(field, what, x):
    raise PlanError("%s: %s, got %s" % (field, what, _show(x)))


def _walk(x, field, depth):
    """NaN or infinity anywhere, or nesting deeper than MAX_DEPTH."""
    if depth > MAX_DEPTH:
        raise PlanError("%s: nested more than %d deep" % (field, MAX_DEPTH))
    if isinstance(x, float):
        if not isfinite(x):
            _bad(field, "a finite number", x)
    elif isinstance(x, dict):
        for k in x:
            if not isinstance(k, str):
                _bad(field, "string keys", k)
            _walk(x[k], field + "." + k, depth + 1)
    elif isinstance(x, list):
        for i in range(len(x)):
            _walk(x[i], "%s[%d]" % (field, i), depth + 1)


def _obj(doc, key, field, need=True):
    x = doc.get(key)
    if x is None and not need:
        return None
    if not isinstance(x, dict):
        _bad(field, "missing" if x is None else "a JSON object", x)
    return x


def _int(d, key, field, lo=0, hi=MAX_BYTES, need=True):
    x = d.get(key)
    if x is None and not need:
        return None
    if isinstance(x, bool) or not isinstance(x, int):
        _bad(field, "missing" if x is None else "an integer", x)
    if x < lo or x > hi:
        _bad(field, "an integer in %d..%d" % (lo, hi), x)
    return x
