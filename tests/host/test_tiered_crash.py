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

from kvedge import budget
from kvedge.tier import store as coldstore
from kvedge.config import CacheConfig
from kvedge.errors import ColdStoreError
from kvedge.tier.cache import TieredCache

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


def _documented(k0, count, saved, block=4):
    """The positions a reopened store holds (docs/tiered.md, "Durability"): the 2 sinks once saved, and the
    blocks of its last commit that landed."""
    return (list(range(2)) if saved else []) + list(range(2 + block * k0, 2 + block * (k0 + count)))


def _snapshot(tc, k0, count, saved, block=4):
    """The rows of the sinks (when saved) and of cold blocks k0..k0+count-1, as the cache reads them."""
    row = array("f", [0.0] * 8)
    pos = _documented(k0, count, saved, block)
    snap = {}
    for p in pos:
        for layer in range(2):
            for h in range(2):
                for kv in (0, 1):
                    tc.read(layer, h, p, kv, row)
                    snap[(p, layer, h, kv)] = bytes(row)
    return snap


def _record(path, policy, tokens, cold="i4", block=4):
    """Run the stream with every write recorded; returns (log, entries of the creation, {seq: committed rows})."""
    log = []
    coldstore.open = _recording_open(log)
    try:
        tc = TieredCache(_cfg(), path, block=block, cold=cold, cold_blocks=3, at_cap=policy, fresh=True)
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
                committed[seq] = _snapshot(tc, k0, count, saved, block)
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


@pytest.mark.parametrize("cold", ["i8", "i4"])
def test_power_cut_at_every_write_boundary_of_a_200_token_stream(tmp_path, cold):
    # docs/tiered.md "Durability", checked at every write boundary (and with the last write torn) of a 200-token
    # stream that fills, wraps and drops from a 3-block store: every reopen is whole with exactly the documented
    # tokens (the sinks once saved, the blocks of the last commit that landed, the stream resuming right after
    # them), every row as committed; or, only when the cut fell inside the store's creation, ColdStoreError
    # naming the file and the damage
    block = 8
    log, created, committed = _record(str(tmp_path / "cold"), "drop", 200, cold, block)
    assert len(committed) >= 200 // block - 1
    cut = tmp_path / "cut"
    checked = refused = 0
    row = array("f", [0.0] * 8)
    for upto in range(1, len(log) + 1):
        for torn in (False, True) if log[upto - 1][0] == "w" else (False,):
            cut.mkdir()
            for name, data in _image(log, upto, (), torn).items():
                (cut / name.replace("cold", "cut")).write_bytes(data)
            want = _expected(log, upto, (), torn) or (0, 0, 0, False)
            try:
                tc = TieredCache(_cfg(), str(cut / "cut"), block=block, cold=cold, cold_blocks=3)
            except ColdStoreError as e:
                assert upto <= created, (upto, torn, str(e))
                assert str(cut / "cut") in str(e) and "refusing the cold store" in str(e), str(e)
                refused += 1
            else:
                try:
                    st = tc.store
                    assert (st.seq, st.k0, st.count, st.saved) == want, (upto, torn)
                    live = array("i", [0] * 64)
                    n = tc.positions(live)
                    assert list(live[:n]) == _documented(st.k0, st.count, st.saved, block), (upto, torn)
                    resume = 2 + block * (st.k0 + st.count) if st.k0 + st.count else 0  # nothing yet: from 0
                    assert tc.resume_pos == resume, (upto, torn)
                    assert _snapshot(tc, st.k0, st.count, st.saved, block) == committed[st.seq], (upto, torn)
                    if n:
                        tc.read(0, 0, live[n - 1], 1, row)  # the newest documented token reads back
                    checked += 1
                finally:
                    tc.close()
            for f in cut.iterdir():
                f.unlink()
            cut.rmdir()
    assert checked > 2 * 200 // block * 5, (checked, refused)


def test_power_cut_while_fresh_true_recreates_a_store(tmp_path):
    # docs/tiered.md: a cut while fresh=True re-creates a store reopens empty or as the old store at its last
    # commit, whole; for both parities of the old store's last commit (which header file is its newest)
    for tokens in (2 + 8 + 4 * 3, 2 + 8 + 4 * 4):
        path = str(tmp_path / ("old%d" % tokens))
        _, _, committed = _record(path, "drop", tokens)
        old = {x: open(path + x, "rb").read() for x in (".h0", ".h1", ".s", ".0", ".1")}
        last = max((_header_state(old[x]) for x in (".h0", ".h1")), key=lambda st: st[0])
        log = []
        coldstore.open = _recording_open(log)
        try:
            TieredCache(_cfg(), path, block=4, cold="i4", cold_blocks=3, fresh=True).close()
        finally:
            del coldstore.open
        outcomes = set()
        for upto in range(len(log) + 1):
            for torn in (False, True) if upto and log[upto - 1][0] == "w" else (False,):
                cut = tmp_path / ("cut%d_%d_%d" % (tokens, upto, torn))
                cut.mkdir()
                files = {"old%d%s" % (tokens, x): bytearray(v) for x, v in old.items()}
                for name, data in _image(log, upto, (), torn).items():
                    files[name] = data  # a file this creation opened for writing: what it wrote since
                for name, data in files.items():
                    (cut / name.replace("old%d" % tokens, "cut")).write_bytes(bytes(data))
                tc = TieredCache(_cfg(), str(cut / "cut"), block=4, cold="i4", cold_blocks=3)
                try:
                    st = tc.store
                    state = (st.seq, st.k0, st.count, st.saved)
                    assert state in (last, (0, 0, 0, False)), (tokens, upto, torn, state, last)
                    if state == last:
                        assert _snapshot(tc, st.k0, st.count, st.saved) == committed[st.seq], (tokens, upto)
                    outcomes.add(state == last)
                finally:
                    tc.close()
        assert outcomes == {True, False}, outcomes  # both the old store and the empty one were seen
