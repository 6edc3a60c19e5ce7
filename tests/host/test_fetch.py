"""`kvedge fetch` against a local stand-in of the Hugging Face Hub on 127.0.0.1 (never the network): an http.server
thread answering the Hub's URL layout ({endpoint}/{repo}/resolve/{revision}/{path}, HEAD with X-Repo-Commit and the
LFS sha256 as ETag, GET with Range), HF_ENDPOINT pointing at it, a temporary HF_HOME and XDG_CACHE_HOME.

A good download lands in the cache and generate/eval find it there; a truncated download, a wrong checksum and no
network at all each end in one line, exit 2, with nothing left in the cache."""
import hashlib
import http.server
import io
import os
import socket
import struct
import subprocess
import sys
import threading

import pytest

from kvedge_host.boards import tinyckpt
from kvedge_host.paths import SHARED

REAL = os.path.join(SHARED, "models")
have_real = pytest.mark.skipif(not os.path.exists(os.path.join(REAL, "stories260K.bin")),
                               reason="../shared/models/stories260K.bin is absent (the pinned digest is its)")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub(http.server.ThreadingHTTPServer):
    """files: URL path -> bytes served; listed: URL path -> the bytes whose sha256 and size HEAD announces (what
    the Hub lists); truncate: URL path -> how many bytes a GET sends before it drops the connection."""
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files, self.listed, self.truncate, self.log = {}, {}, {}, []

    def put(self, repo, path, data, listed=None):
        key = "/%s/resolve/main/%s" % (repo, path)
        self.files[key] = data
        self.listed[key] = data if listed is None else listed
        return key

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _head(self):
        hub = self.server
        hub.log.append((self.command, self.path, self.headers.get("Range")))
        data = hub.files.get(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None, 0
        listed = hub.listed[self.path]
        start = 0
        rng = self.headers.get("Range")
        if rng and self.command == "GET":
            start = int(rng.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        else:
            self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"%s"' % hashlib.sha256(listed).hexdigest())
        self.send_header("X-Linked-Etag", '"%s"' % hashlib.sha256(listed).hexdigest())
        self.send_header("X-Linked-Size", str(len(listed)))
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        return data, start

    def do_HEAD(self):
        self._head()

    def do_GET(self):
        data, start = self._head()
        if data is None:
            return
        stop = self.server.truncate.get(self.path, len(data))
        if stop > start:
            self.wfile.write(data[start:stop])
        self.wfile.flush()
        if stop < len(data):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def hub():
    h = Hub()
    t = threading.Thread(target=h.serve_forever, daemon=True)
    t.start()
    try:
        yield h
    finally:
        h.shutdown()
        h.server_close()


def env_for(tmp_path, endpoint):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    e.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), XDG_CACHE_HOME=str(tmp_path / "cache"),
             KVEDGE_SHARED=str(tmp_path / "no-shared"), NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    e.pop("HF_HUB_OFFLINE", None)
    return e


def kvedge(env, *args, timeout=120):
    r = subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + list(args), capture_output=True, text=True,
                       env=env, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def cache_files(tmp_path):
    """Every file under the cache folder, relative paths (hidden temporaries included)."""
    root = tmp_path / "cache"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def real(name):
    with open(os.path.join(REAL, name), "rb") as f:
        return f.read()


def put_real(hub):
    hub.put("karpathy/tinyllamas", "stories260K/stories260K.bin", real("stories260K.bin"))
    hub.put("karpathy/tinyllamas", "stories260K/tok512.bin", real("tok512.bin"))


@have_real
def test_a_good_download_lands_in_the_cache_and_generate_finds_it(hub, tmp_path):
    put_real(hub)
    env = env_for(tmp_path, hub.url)
    rc, out, err = kvedge(env, "fetch", "stories260K")
    assert rc == 0, err
    models = tmp_path / "cache" / "kvedge" / "models"
    assert cache_files(tmp_path) == ["kvedge/models/stories260K.bin", "kvedge/models/tok512.bin"]
    # the bytes served, whole; their digests as sha256sum gives them for ../shared/models (README there)
    assert (models / "stories260K.bin").read_bytes() == real("stories260K.bin")
    assert hashlib.sha256((models / "tok512.bin").read_bytes()).hexdigest() == \
        "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"
    assert str(models) in out
    assert [p for m, p, _ in hub.log if m == "GET" and "/resolve/" in p] == [
        "/karpathy/tinyllamas/resolve/main/stories260K/stories260K.bin",
        "/karpathy/tinyllamas/resolve/main/stories260K/tok512.bin"]
    # again: nothing downloaded, the files are checked in place
    n = len([x for x in hub.log if "/resolve/" in x[1]])
    rc, out2, err = kvedge(env, "fetch")
    assert rc == 0 and "already here" in out2, (out2, err)
    assert len([x for x in hub.log if "/resolve/" in x[1]]) == n
    # generate (no --model) finds the cached model with ../shared hidden: llama2.c's greedy text from BOS
    rc, out, err = kvedge(env, "generate", "--steps", "12", "--runtime", "cpython")
    assert rc == 0, err
    assert out.startswith("Once upon a time, there was a little girl"), out


@have_real
def test_a_truncated_download_is_one_line_and_leaves_nothing(hub, tmp_path):
    put_real(hub)
    key = hub.put("karpathy/tinyllamas", "stories260K/stories260K.bin", real("stories260K.bin"))
    hub.truncate[key] = 400000
    rc, out, err = kvedge(env_for(tmp_path, hub.url), "fetch")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvedge fetch: error: stories260K.bin: download truncated: "
                                                   "400,000 of 1,056,540 bytes arrived"), err
    assert cache_files(tmp_path) == []


@have_real
def test_a_wrong_checksum_is_refused_and_not_kept(hub, tmp_path):
    # the Hub stand-in lists the file it serves (so huggingface_hub's own size check passes), but one byte differs
    # from the real stories260K.bin: only the pinned digest can tell
    put_real(hub)
    bad = bytearray(real("stories260K.bin"))
    bad[1000] ^= 1
    hub.put("karpathy/tinyllamas", "stories260K/stories260K.bin", bytes(bad))
    rc, out, err = kvedge(env_for(tmp_path, hub.url), "fetch")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "stories260K/stories260K.bin: sha256 %s, expected b0a507e7" % hashlib.sha256(bad).hexdigest() in lines[0]
    assert "not kept" in lines[0]
    assert cache_files(tmp_path) == []


def test_no_network_is_one_line_and_leaves_nothing(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: connection refused
    rc, out, err = kvedge(env_for(tmp_path, "http://127.0.0.1:%d" % port), "fetch", "stories15M")
    assert rc == 2
    lines = err.strip().splitlines()
    assert lines == ["kvedge fetch: error: stories15M.bin: cannot reach the Hub at http://127.0.0.1:%d "
                     "([Errno 111] Connection refused); check the network or HF_ENDPOINT" % port], err
    assert cache_files(tmp_path) == []


def test_a_missing_file_on_the_hub_is_one_line(hub, tmp_path):
    rc, out, err = kvedge(env_for(tmp_path, hub.url), "fetch", "stories42M")
    assert rc == 2
    assert err.strip().splitlines() == [
        "kvedge fetch: error: %s/karpathy/tinyllamas/resolve/main/stories42M.bin: no such file on the Hub"
        % hub.url], err
    assert cache_files(tmp_path) == []


def _llama2_like_spm():
    """A real sentencepiece BPE model of 32,000 pieces (byte fallback, like Llama 2's), trained here on the docs:
    30,000 user-defined filler symbols make up the count a small corpus cannot."""
    import glob

    import sentencepiece as spm
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = [ln for f in sorted(glob.glob(os.path.join(root, "docs", "*.md"))) for ln in open(f) if ln.strip()]
    w = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=w, vocab_size=32000,
                                   model_type="bpe", byte_fallback=True, minloglevel=2, num_threads=1,
                                   user_defined_symbols=["<u%d>" % i for i in range(30000)])
    return w.getvalue(), spm.SentencePieceProcessor(model_proto=w.getvalue())


def test_stories15M_and_the_llama2_tokenizer_converted(hub, tmp_path):
    # the unpinned files are checked against the sha256 the Hub lists; the tokenizer.model is converted to
    # llama2.c's tokenizer.bin, compared here with sentencepiece's own pieces and scores, written out by hand
    model, _ = tinyckpt.write(str(tmp_path / "w"), seed=3)
    ckpt = open(model, "rb").read()
    proto, sp = _llama2_like_spm()
    hub.put("karpathy/tinyllamas", "stories15M.bin", ckpt)
    hub.put("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tokenizer.model", proto)
    rc, out, err = kvedge(env_for(tmp_path, hub.url), "fetch", "stories15M")
    assert rc == 0, err
    models = tmp_path / "cache" / "kvedge" / "models"
    assert cache_files(tmp_path) == ["kvedge/models/stories15M.bin", "kvedge/models/tokenizer.bin"]
    assert (models / "stories15M.bin").read_bytes() == ckpt
    blob = (models / "tokenizer.bin").read_bytes()
    want = []
    for i in range(32000):
        t = {1: "\n<s>\n", 2: "\n</s>\n"}.get(i, sp.IdToPiece(i))
        want.append((struct.unpack("<f", struct.pack("<f", sp.GetScore(i)))[0], t.replace("\u2581", " ").encode()))
    assert struct.unpack_from("<i", blob, 0)[0] == max(len(p) for _, p in want)
    off = 4
    for score, piece in want:
        s, n = struct.unpack_from("<fi", blob, off)
        assert (s, blob[off + 8:off + 8 + n]) == (score, piece)
        off += 8 + n
    assert off == len(blob)
    # and the device's reader encodes with it as sentencepiece does
    from kvedge.model.tokenizer import Tokenizer
    tok = Tokenizer.load(str(models / "tokenizer.bin"), 32000)
    assert tok.encode("the cache fits the board", bos=False) == sp.encode("the cache fits the board")


def test_a_wrong_hub_digest_for_an_unpinned_file(hub, tmp_path):
    model, _ = tinyckpt.write(str(tmp_path / "w"), seed=3)
    ckpt = open(model, "rb").read()
    other = bytearray(ckpt)
    other[-1] ^= 0xFF
    hub.put("karpathy/tinyllamas", "stories110M.bin", ckpt, listed=bytes(other))
    rc, out, err = kvedge(env_for(tmp_path, hub.url), "fetch", "stories110M")
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "stories110M.bin: sha256 %s, expected %s (the Hub's" % (
        hashlib.sha256(ckpt).hexdigest(), hashlib.sha256(other).hexdigest()) in lines[0], err
    assert cache_files(tmp_path) == []


@have_real
def test_demo_runs_the_fetched_model_without_shared(tmp_path):
    # the acceptance: after `kvedge fetch` (here: the same files put in the cache by hand), a clone
    # without ../shared runs the demo on the real stories260K, not the random stand-in
    models = tmp_path / "cache" / "kvedge" / "models"
    models.mkdir(parents=True)
    for name in ("stories260K.bin", "tok512.bin"):
        (models / name).write_bytes(real(name))
    env = env_for(tmp_path, "http://127.0.0.1:9")  # no Hub needed
    rc, out, err = kvedge(env, "demo", "--plain", "--steps", "6", "--stats-ms", "100", timeout=300)
    assert rc == 0, (out + err)[-3000:]
    text = out + err
    assert "model: %s" % (models / "stories260K.bin") in text, text[:2000]
    assert "Once upon a time" in text, text[-2000:]


def test_bad_arguments_are_one_line_before_any_download(tmp_path):
    env = env_for(tmp_path, "http://127.0.0.1:9")
    (tmp_path / "f").write_text("x")
    for args, want in ((["fetch", "stories1B"], "stories1B: not a model kvedge fetch knows (stories260K, "
                                                "stories15M, stories42M, stories110M)"),
                       (["fetch", "--dir", str(tmp_path / "f")], "%s: not a folder" % (tmp_path / "f"))):
        rc, out, err = kvedge(env, *args)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and want in err, (args, err)
    assert not (tmp_path / "cache").exists()
