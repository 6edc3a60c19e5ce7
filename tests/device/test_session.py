# A saved session's files (kvedge.session, issue 45 item 3), on a cache alone (no model): a power cut at every write
# of a save leaves the previous save loadable; every flipped byte and every truncation of a save is refused with the
# cache unchanged; foreign, missing and mismatched saves are refused, naming the file and the part. The continuation
# of a model's run: test_session_resume.py, test_session_tiered.py.
from _support import ON_BOARD, message, need, raises, tmp_path
from kvedge import session
from kvedge.cache import KVCache
from kvedge.config import CacheConfig
from kvedge.errors import SessionError

V = 64
PATH = []


def _path():
    need("fs")
    if not PATH:
        PATH.append(tmp_path("kvedge_sess_files"))
    return PATH[0]

CFG = CacheConfig(2, 2, 1, 4, 10, "i8", window=8, sinks=2, align=0)


def _row(p, layer, kv):
    return [((p * 7 + layer * 3 + kv + i) % 11) * 0.25 - 1.2 for i in range(4)]


def _cache(n, cfg=CFG):
    c = KVCache(cfg)
    for p in range(n):
        c.append([_row(p, l, 0) for l in range(cfg.layers)], [_row(p, l, 1) for l in range(cfg.layers)])
    return c


def _snap(c):
    return (bytes(c.arena), list(c.slot_pos), list(c.res_lo), list(c.res_hi), list(c.kbits), list(c.group_live),
            c.n_seen, c.n_cached, c.n_pre, c.span, c.cur_slot, c.used_bytes, c.peak_bytes, c.live_groups,
            c.evictions, c.alloc_failures)


def _read(name):
    f = open(name, "rb")
    try:
        return f.read()
    finally:
        f.close()


def _write(name, b):
    f = open(name, "wb")
    try:
        f.write(b)
    finally:
        f.close()


class PowerCut(Exception):
    pass


CUT = [-1]  # writes left before the power goes (-1: none armed)
WRITES = [0]


class _CutFile:
    """A session file whose writes stop at a power cut: the write it comes in lands half-way (a torn write)."""

    def __init__(self, f):
        self.f = f

    def write(self, b):
        WRITES[0] += 1
        if CUT[0] == 0:
            self.f.write(bytes(b)[:len(b) // 2])
            raise PowerCut()
        if CUT[0] > 0:
            CUT[0] -= 1
        return self.f.write(b)

    def readinto(self, b):
        return self.f.readinto(b)

    def seek(self, *a):
        return self.f.seek(*a)

    def flush(self):
        return self.f.flush()

    def close(self):
        return self.f.close()


def _cut_open(name, mode="r"):
    return _CutFile(open(name, mode))


def test_a_power_cut_at_every_write_leaves_the_previous_save():
    path = _path()
    session.remove(path)
    a = _cache(5)
    session.save(path, a)
    want_a = _snap(a)
    b = _cache(13)
    want_b = _snap(b)
    session.open = _cut_open
    try:
        WRITES[0] = 0
        session.save(path, b)  # counts a save's writes (the third save then overwrites this one's file)
        writes = WRITES[0]
        assert writes > 6, writes
        session.save(path, a)  # a again, newest: each cut below must leave it
        for k in range(writes):
            CUT[0] = k
            e = raises(PowerCut, session.save, path, b)
            CUT[0] = -1
            c = _cache(9)
            session.load(path, c)
            assert _snap(c) == want_a, k
        session.save(path, b)  # and a whole save is the newest
    finally:
        CUT[0] = -1
        session.open = open
    c = _cache(2)
    session.load(path, c)
    assert _snap(c) == want_b
    assert e is not None
    session.remove(path)


def test_every_flipped_byte_and_every_truncation_is_refused_with_the_cache_unchanged():
    path = _path()
    session.remove(path)
    name = session.save(path, _cache(11))
    good = _read(name)
    c = _cache(6)
    before = _snap(c)
    step = 5 if ON_BOARD else 1
    parts = {}
    for at in range(0, len(good), step):
        b = bytearray(good)
        b[at] ^= 0x10
        _write(name, b)
        e = raises(SessionError, session.load, path, c)
        assert name in message(e) or path in message(e), message(e)
        m = message(e)
        parts[m[m.find(":") + 2:][:18]] = 1
        assert _snap(c) == before, at
    assert len(parts) >= 5, parts  # the header, the state, the tables, the arena and the end record named
    for n in range(0, len(good), step):
        _write(name, good[:n])
        e = raises(SessionError, session.load, path, c)
        assert _snap(c) == before, n
    _write(name, good)
    session.load(path, c)  # the whole file loads
    assert _snap(c) == _snap(_cache(11))
    # a second save; the newer one cut short: the previous is loaded (a power cut's mark), never half of the new
    name2 = session.save(path, _cache(15))
    assert name2 != name
    whole2 = _read(name2)
    for n in (1, 20, len(whole2) // 2, len(whole2) - 1):
        _write(name2, whole2[:n])
        c = _cache(3)
        session.load(path, c)
        assert _snap(c) == _snap(_cache(11)), n
    session.remove(path)


def test_foreign_missing_and_mismatched_saves_are_refused_by_name():
    path = _path()
    session.remove(path)
    c = _cache(4)
    before = _snap(c)
    e = raises(SessionError, session.load, path, c)
    assert "no saved session" in message(e), message(e)
    _write(path + ".s0", b"not a session at all, but long enough to hold a header" * 4)
    e = raises(SessionError, session.load, path, c)
    assert "not a kvedge session" in message(e) and path + ".s0" in message(e), message(e)
    session.remove(path)
    session.save(path, _cache(7))
    for cfg, field in ((CacheConfig(2, 2, 1, 4, 12, "i8", window=10, sinks=2, align=0), "slots 10 in the file"),
                       (CacheConfig(2, 2, 1, 4, 10, "f16", window=8, sinks=2, align=0), "dtype"),
                       (CacheConfig(3, 2, 1, 4, 10, "i8", window=8, sinks=2, align=0), "layers")):
        e = raises(SessionError, session.load, path, KVCache(cfg))
        assert "another layout" in message(e) and field in message(e), (field, message(e))
    from kvedge.evict import H2O
    h = KVCache(CacheConfig(2, 2, 1, 4, 10, "i8", align=0))
    pol = H2O(h, budget=10, recent=3)
    e = raises(SessionError, session.load, path, h, pol)
    assert "H2O" in message(e), message(e)
    from kvedge.model.sampler import Sampler
    e = raises(SessionError, session.load, path, c, None, Sampler(V, 1.0, 3))
    assert "sampler" in message(e), message(e)
    assert _snap(c) == before
    session.remove(path)
