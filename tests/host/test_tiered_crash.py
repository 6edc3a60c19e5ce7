"""Power cuts at every point of a tiered cache's stream: the cold store reopens exactly as its last commit left it
(every block and the sinks bit-identical to what was committed), or, only when the cut fell inside the file's
creation, is refused with ColdStoreError. Never half-read.

Every truncation, write, flush and close the store makes is recorded; the files a cut leaves are rebuilt from
the log: what a file had when it was last flushed or closed is on flash, and of each file's operations since
then any subset may have landed (each one alone missing, all missing, the last write torn halfway)."""
import os
import struct
import zlib
from array import array

import pytest

from kvedge import budget, coldstore
from kvedge.config import CacheConfig
from kvedge.errors import ColdStoreError
from kvedge.tiered import TieredCache

HDR_BYTES = budget.TIER_HEADER_BYTES


class _Recording:
    def __init__(self, f, name, log):
        self.f, self.name, self.log = f, name, log

    def write(self, b):
        self.log.append(("w", self.name, self.f.tell(), bytes(b)))
        return self.f.write(b)

    def flush(self):
        self.log.append(("f", self.name))
        return self.f.flush()

    def close(self):
        self.log.append(("f", self.name))
        return self.f.close()

    def __getattr__(self, name):
        return getattr(self.f, name)


def _recording_open(log):
    real_open = open

    def opener(path, mode):
        f = real_open(path, mode)
        name = os.path.basename(path)
        if "w" in mode:
            log.append(("t", name))
        return _Recording(f, name, log)
    return opener


def _is_header(e):
    return e[0] == "w" and e[1].endswith((".h0", ".h1")) and len(e[3]) == HDR_BYTES


def _cfg():
    return CacheConfig(2, 4, 2, 8, 10, "i8", window=8, sinks=2, prefix=2, align=0)


def _rows(seed, pos, layer):
    x = (seed * 7919 + pos * 131 + layer * 17) % 2147483647 or 1
    k, v = array("f", [0.0] * 16), array("f", [0.0] * 16)
    for i in range(16):
        x = x * 48271 % 2147483647
        k[i] = (x % 2001 - 1000) / 250.0
        x = x * 48271 % 2147483647
        v[i] = (x % 2001 - 1000) / 500.0
    return k, v


def _feed(tc, n, seed=3):
    for _ in range(n):
        p = tc.ring.n_seen
        ks, vs = zip(*[_rows(seed, p, layer) for layer in range(2)])
        tc.append(list(ks), list(vs))


def _image(log, upto, drop=(), torn=False):
    """The files ({name: bytes}) after the first `upto` log entries without the entries in `drop`; the last
    one torn halfway when it is a write."""
    files = {}
    for i, e in enumerate(log[:upto]):
        if i in drop or e[0] == "f":
            continue
        if e[0] == "t":
            files[e[1]] = bytearray()
            continue
        img = files.setdefault(e[1], bytearray())
        off, data = e[2], e[3]
        if torn and i == upto - 1:
            data = data[:len(data) // 2]
        if len(img) < off + len(data):
            img.extend(bytes(off + len(data) - len(img)))
        img[off:off + len(data)] = data
    return files


def _header_state(data):
    v = struct.unpack_from(coldstore.HDR, data, 0)
    return v[13], v[14], v[15], v[3] != 0  # seq, first block, count, sinks saved


def _expected(log, upto, drop, torn):
    """(seq, k0, count, saved) of the newest header write that fully landed (and was not truncated away)."""
    last = {}
    for i, e in enumerate(log[:upto]):
        if i in drop:
            continue
        if e[0] == "t":
            last.pop(e[1], None)
        elif _is_header(e) and not (torn and i == upto - 1):
            last[e[1]] = _header_state(e[3])
    best = None
    for st in last.values():
        if best is None or coldstore._newer(st[0], best[0]):
            best = st
    return best


def _cuts(log):
    """(upto, drop, torn) for every cut point: after each entry, with subsets of the operations not yet flushed
    or closed in their own file."""
    for upto in range(1, len(log) + 1):
        durable = {}
        for i, e in enumerate(log[:upto]):
            if e[0] == "f":
                durable[e[1]] = i
        pending = [i for i, e in enumerate(log[:upto]) if e[0] != "f" and i > durable.get(e[1], -1)]
        yield upto, (), False
        if log[upto - 1][0] == "w":
            yield upto, (), True
        if pending:
            yield upto, tuple(pending), False
        for i in pending:
            yield upto, (i,), False


def _snapshot(tc, k0, count, saved):
    """The rows of the sinks (when saved) and of cold blocks k0..k0+count-1, as the cache reads them."""
    row = array("f", [0.0] * 8)
    pos = (list(range(2)) if saved else []) + list(range(2 + 4 * k0, 2 + 4 * (k0 + count)))
    snap = {}
    for p in pos:
        for layer in range(2):
            for h in range(2):
                for kv in (0, 1):
                    tc.read(layer, h, p, kv, row)
                    snap[(p, layer, h, kv)] = bytes(row)
    return snap


def _record(path, policy, tokens):
    """Run the stream with every write recorded; returns (log, entries of the creation, {seq: committed rows})."""
    log = []
    coldstore.open = _recording_open(log)
    try:
        tc = TieredCache(_cfg(), path, block=4, cold="i4", cold_blocks=3, at_cap=policy, fresh=True)
        created = len(log)
        committed = {0: {}}
        seen = 0
        for _ in range(tokens):
            _feed(tc, 1)
            st = tc.store
            # every header written by this token: its state's rows are what the cache reads now, restricted
            # to that state's blocks (a drop's commit precedes the new block's within one token)
            heads = [e for e in log[seen:] if _is_header(e)]
            seen = len(log)
            for e in heads:
                seq, k0, count, saved = _header_state(e[3])
                assert k0 >= st.k0 and k0 + count <= st.k0 + st.count
                committed[seq] = _snapshot(tc, k0, count, saved)
        tc.close()
    finally:
        del coldstore.open
    return log, created, committed


def test_adler_matches_zlib():
    ab = array("i", [1, 0])
    data = bytes(range(256)) * 40 + b"kvedge"
    coldstore.adler(data, len(data), ab)
    assert (ab[1] << 16) | ab[0] == zlib.adler32(data)


@pytest.mark.parametrize("policy", ["drop", "reset"])
def test_power_cut_anywhere_reopens_the_last_commit_or_refuses_only_at_creation(tmp_path, policy):
    log, created, committed = _record(str(tmp_path / "cold"), policy, 2 + 8 + 4 * 9 + 1)
    assert len(committed) >= 8  # sinks, ring, then blocks through a 3-block store: drops, or resets
    checked = refused = 0
    for n, (upto, drop, torn) in enumerate(_cuts(log)):
        cut = tmp_path / ("cut%d" % n)
        cut.mkdir()
        for name, data in _image(log, upto, drop, torn).items():
            (cut / name.replace("cold", "cut")).write_bytes(data)
        want = _expected(log, upto, drop, torn)
        try:
            tc = TieredCache(_cfg(), str(cut / "cut"), block=4, cold="i4", cold_blocks=3, at_cap=policy)
        except ColdStoreError as e:
            assert upto <= created, (upto, drop, torn, str(e))  # only a file whose creation was cut
            refused += 1
            continue
        try:
            st = tc.store
            want = want or (0, 0, 0, False)  # no header landed: an empty store starts (nothing was committed)
            assert (st.seq, st.k0, st.count, st.saved) == want, (upto, drop, torn)
            assert _snapshot(tc, st.k0, st.count, st.saved) == committed[st.seq], (upto, drop, torn)
            if st.count:
                out = array("f", [0.0] * 32)
                tc.step(1, array("f", [0.5] * 32), out)  # attention over what reopened works
            checked += 1
        finally:
            tc.close()
    assert checked > 100, (checked, refused)
