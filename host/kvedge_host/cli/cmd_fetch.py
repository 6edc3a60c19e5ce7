"""Download the real tinyllamas checkpoints (llama2.c's stories models) from the Hugging Face Hub into your cache.

    kvedge fetch                  # stories260K.bin and its tok512.bin (what demo, generate and eval use)
    kvedge fetch stories15M       # stories15M.bin and the 32,000-token Llama 2 tokenizer.bin
    kvedge fetch --list           # what can be fetched, and what is already here

The files go to $XDG_CACHE_HOME/kvedge/models (else ~/.cache/kvedge/models), where `kvedge demo`, `generate`,
`eval` and the tests look after ../shared/models (kvedge_host.paths.model_file). Each file is downloaded with
huggingface_hub into a temporary folder there and checked before it takes its name: stories260K.bin and
tok512.bin against the sha256 pinned below, the others against the sha256 the Hub lists for them (its LFS
object id). The 32,000-token tokenizer is Llama 2's sentencepiece tokenizer.model from the TinyLlama-1.1B repo
(TinyLlama kept Llama 2's vocabulary), converted to llama2.c's tokenizer.bin format by kvedge_host.readers.vocab, as
llama2.c's tokenizer.py does. A truncated download, a wrong digest or no network ends in one line, exit 2, and
nothing half-written is left in the cache. HF_ENDPOINT points at another Hub (a mirror)."""
import hashlib
import os
import re
import shutil
import sys
import tempfile

from ..errors import UserError
from ..paths import TOKENIZER_VOCAB, cache_models

TINYLLAMAS = "karpathy/tinyllamas"
LLAMA2_TOKENIZER = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"  # tokenizer.model: Llama 2's 32,000-token sentencepiece

# name in the cache -> (Hub repo, path in the repo, pinned sha256 or None (the Hub's), convert from sentencepiece)
FILES = {
    "stories260K.bin": (TINYLLAMAS, "stories260K/stories260K.bin",
                        "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696", False),
    "tok512.bin": (TINYLLAMAS, "stories260K/tok512.bin",
                   "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312", False),
    "stories15M.bin": (TINYLLAMAS, "stories15M.bin", None, False),
    "stories42M.bin": (TINYLLAMAS, "stories42M.bin", None, False),
    "stories110M.bin": (TINYLLAMAS, "stories110M.bin", None, False),
    "tokenizer.bin": (LLAMA2_TOKENIZER, "tokenizer.model", None, True),
}
MODELS = {
    "stories260K": ("stories260K.bin", "tok512.bin"),
    "stories15M": ("stories15M.bin", "tokenizer.bin"),
    "stories42M": ("stories42M.bin", "tokenizer.bin"),
    "stories110M": ("stories110M.bin", "tokenizer.bin"),
}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def add_arguments(p):
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="models to fetch: %s (default: stories260K)" % ", ".join(MODELS))
    p.add_argument("--dir", help="keep the files in DIR (default: $XDG_CACHE_HOME/kvedge/models, else "
                                 "~/.cache/kvedge/models)")
    p.add_argument("--force", action="store_true",
                   help="download again even when a file is already in the folder")
    p.add_argument("--list", action="store_true", help="list the models, their files and which are here")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _endpoint():
    from huggingface_hub import constants
    return constants.ENDPOINT


def _where(name):
    repo, path = FILES[name][:2]
    return "%s/%s/resolve/main/%s" % (_endpoint(), repo, path)


def _fail(name, e):
    """One line for an error huggingface_hub raised while fetching `name`."""
    from huggingface_hub import errors
    url = _where(name)
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if isinstance(e, (errors.RepositoryNotFoundError, errors.RevisionNotFoundError)):
        return "%s: no such repository on the Hub (%s)" % (url, text)
    if isinstance(e, errors.EntryNotFoundError) and not isinstance(e, errors.LocalEntryNotFoundError):
        return "%s: no such file on the Hub" % url
    chain, c = [], e
    while c is not None and len(chain) < 8:
        chain.append(c)
        c = c.__cause__ or c.__context__
    unreachable = [c for c in chain if type(c).__name__ in ("ConnectError", "ConnectTimeout")]
    if unreachable or isinstance(e, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)):
        why = _first(unreachable[0]) if unreachable else _first(chain[-1]) if len(chain) > 1 else "offline"
        return "%s: cannot reach the Hub at %s (%s); check the network or HF_ENDPOINT" % (name, _endpoint(), why)
    m = (re.search(r"received (\d+) bytes, expected (\d+)", text)
         or re.search(r"should be of size (\d+) but has size (\d+)", text))
    if m:
        got, want = (m.group(1), m.group(2)) if text.find("received") >= 0 else (m.group(2), m.group(1))
        return "%s: download truncated: %s of %s bytes arrived (from %s); nothing kept, run again" % (
            name, format(int(got), ","), format(int(want), ","), url)
    return "%s: download failed (%s): %s" % (name, url, text)


def _hub_sha256(name):
    """The sha256 the Hub lists for a file (the ETag of an LFS object), checked to be one."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    repo, path = FILES[name][:2]
    meta = get_hf_file_metadata(hf_hub_url(repo, path))
    etag = (meta.etag or "").strip('"').lower()
    if not _HEX64.match(etag):
        raise UserError("%s: the Hub lists no sha256 for it (ETag %r), so it cannot be checked" % (_where(name), etag))
    return etag


def _check_tokenizer(name, path):
    """A tokenizer file holds the vocabulary it should (read by the device package's reader)."""
    from kvedge.model.tokenizer import Tokenizer
    vocab = TOKENIZER_VOCAB[name]
    try:
        tok = Tokenizer.load(path, vocab)
    except (ValueError, OSError, MemoryError) as e:
        raise UserError("%s: not a %d-token llama2.c tokenizer (%s)" % (name, vocab, _first(e)))
    if 4 + 8 * vocab + tok.off[vocab] != os.path.getsize(path):
        raise UserError("%s: holds more than %d tokens" % (name, vocab))


def _first(e):
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def fetch_file(name, folder, force=False):
    """Download `name` into folder unless a checked copy is there; returns (path, what happened)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub import errors
    repo, path, pinned, convert = FILES[name]
    final = os.path.join(folder, name)
    if os.path.exists(final) and not force:
        if pinned and sha256(final) != pinned:
            raise UserError("%s: in the folder but its sha256 is %s, not %s: remove it or use --force"
                            % (final, sha256(final), pinned))
        return final, "already here"
    os.makedirs(folder, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".fetch-", dir=folder)
    try:
        try:
            want = pinned or _hub_sha256(name)
            got_path = hf_hub_download(repo, path, local_dir=tmp)
        except UserError:
            raise
        except (errors.HfHubHTTPError, errors.LocalEntryNotFoundError, errors.EntryNotFoundError,
                errors.OfflineModeIsEnabled, OSError, ValueError) as e:
            raise UserError(_fail(name, e)) from None
        except Exception as e:  # httpx2's transport errors: connection refused, reset, timeouts
            if type(e).__module__.split(".")[0] not in ("httpx2", "httpx", "httpcore", "httpcore2", "h11"):
                raise
            raise UserError(_fail(name, e)) from None
        got = sha256(got_path)
        if got != want:
            raise UserError("%s: sha256 %s, expected %s (%s, %s bytes): not kept" % (
                _where(name), got, want, "pinned in kvedge_host.cli.cmd_fetch" if pinned else "the Hub's",
                format(os.path.getsize(got_path), ",")))
        if convert:
            from ..models import ModelError
            from ..readers import vocab
            out = os.path.join(tmp, name)
            try:
                vocab.write_bin(out, vocab.from_sentencepiece(got_path))
            except ModelError as e:
                raise UserError(_first(e))
            got_path = out
        if name in TOKENIZER_VOCAB:
            _check_tokenizer(name, got_path)
        os.replace(got_path, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final, "converted from %s/%s" % (repo, path) if convert else "sha256 %s… ok" % want[:12]


def run(a):
    folder = os.path.abspath(a.dir) if a.dir else cache_models()
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UserError("%s: not a folder (--dir names the folder the models are kept in)" % folder)
    names = a.models or ["stories260K"]
    for m in names:
        if m not in MODELS:
            raise UserError("%s: not a model kvedge fetch knows (%s)" % (m, ", ".join(MODELS)))
    if a.list:
        for m, files in MODELS.items():
            here = ["%s%s" % (f, "" if os.path.exists(os.path.join(folder, f)) else " (not here)") for f in files]
            print("%-12s %s" % (m, ", ".join(here)))
        print("folder: %s" % folder)
        return 0
    _quiet()
    files = []
    for m in names:
        files += [f for f in MODELS[m] if f not in files]
    for f in files:
        path, how = fetch_file(f, folder, a.force)
        print("%s  %s bytes  %s" % (path, format(os.path.getsize(path), ","), how))
    print("models in %s: `kvedge demo` and `kvedge generate` find stories260K there; for the others give "
          "--model and --tokenizer" % folder if names != ["stories260K"] else
          "models in %s: `kvedge demo`, `kvedge generate` and `kvedge eval` find them there" % folder)
    return 0


def _quiet():
    """huggingface_hub's own retries and progress bars are not our one-line messages."""
    from huggingface_hub.utils import disable_progress_bars, logging
    logging.set_verbosity_error()
    if not sys.stderr.isatty():
        disable_progress_bars()
