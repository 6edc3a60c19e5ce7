# The session tests' model runs (kvedge.session, issue 45 item 3): a tiny model the tests write (f32 for the float
# pass; int8, _w8ref's, for the integer pass), its steps' logits digested (Adler-32 of their bytes) with the token
# sampled, and the check that a run saved half-way, its model built afresh and loaded, goes on as the uninterrupted
# run did, bit for bit. The test files load the runner's large modules first, each on a collected heap.
import gc

from _support import forget, need, remove_store, tmp_path
from kvedge import session
from kvedge.tier.sizes import adler

PATHS = {}
TEMP, SEED = 0.9, 7  # sampled: the Rng's state must come back too
V = {"f32": 64, "i8": 48}


def files():
    need("fs")
    if PATHS:
        try:  # under pytest each test module runs in its own folder: files made for another are not here
            open(PATHS["sess"], "rb").close()
        except OSError:
            PATHS.clear()
    if not PATHS:
        PATHS.update(sess=tmp_path("kvedge_sess"), cold=tmp_path("kvedge_sess_cold"))
    return PATHS


def weights(wdtype):
    f = files()
    if wdtype not in f:
        p = tmp_path("kvedge_sess_%s.bin" % wdtype)
        if wdtype == "f32":
            from kvedge.model import tiny
            tiny.write_checkpoint(p, seed=5, dim=8, hidden_dim=16, n_heads=2, n_kv_heads=1, vocab_size=V["f32"])
            forget("kvedge.model.tiny")  # written once: its code freed
        else:
            import _w8ref
            _w8ref.write_model(p, seed=11, V=V["i8"])
            forget("_w8ref")
        f[wdtype] = p
    return f[wdtype]


def model(kv, policy=None, tier=None, fresh=True, wdtype="f32", forward="float"):
    from kvedge.model.llama import Llama
    gc.collect()
    f = files()
    cache = None
    if tier is not None and not fresh:  # the store reopened as the save left it (a board after a reset)
        from kvedge import caches

        def cache(ccfg, q8):
            return caches.build(ccfg, tier, f["cold"], tile=8, q8=q8, fresh=False)
    return Llama(weights(wdtype), kv=kv, policy=policy, tier=tier, cold_path=f["cold"], cache=cache, stream=True,
                 tile=8, forward=forward)


def steps(m, sampler, token, n, out, fl=None):
    """n tokens from `token`: each step's logits digest (Adler-32 of their bytes) and the token sampled, into out;
    returns the next token. fl: float logits' buffer for the integer pass (its logits are integers)."""
    ab = [1, 0]
    for _ in range(n):
        lg = m.forward(token)
        b = bytes(lg)
        ab[0], ab[1] = 1, 0
        adler(b, len(b), ab)
        token = sampler.sample(lg if fl is None else m.intp.float_logits(fl))
        out.append((ab[0], ab[1], token))
    return token


def resume_equals_uninterrupted(kv, n, policy=None, tier=None, wdtype="f32", forward="float"):
    """Runs n steps at once, then n // 2, save, a fresh model, load, the rest: equal digests and tokens. Returns
    the resumed cache's stats."""
    from kvedge.compat import zeros
    from kvedge.model.sampler import Sampler
    path = files()["sess"]
    session.remove(path)
    vocab = V[wdtype]
    fl = zeros("f", vocab) if forward == "int" else None
    if tier is not None:
        remove_store(files()["cold"])
    whole = []
    m = model(kv, policy, tier, True, wdtype, forward)
    steps(m, Sampler(vocab, TEMP, SEED), 1, n, whole, fl)
    m.close()
    m = None
    half = []
    m = model(kv, policy, tier, True, wdtype, forward)
    s = Sampler(vocab, TEMP, SEED)
    token = steps(m, s, 1, n // 2, half, fl)
    session.save_run(path, m, s, token)
    m.close()  # the board resets: nothing of this run is left but its files
    m = s = None
    m = model(kv, policy, tier, False, wdtype, forward)
    s = Sampler(vocab, 0.0, 99)  # another temperature and seed: the saved ones come back
    token = session.load_run(path, m, s)
    assert s.temperature == TEMP
    steps(m, s, token, n - n // 2, half, fl)
    st = m.cache.stats()
    m.close()
    session.remove(path)
    assert half == whole, [i for i in range(n) if half[i] != whole[i]][:3]
    return st
