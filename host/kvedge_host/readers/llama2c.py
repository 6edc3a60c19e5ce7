"""llama2.c checkpoints: v0 (run.c's legacy file: seven int32 then f32 weights, what the device reads) and the
"ak42" files of llama2.c's export.py: a 256-byte header (uint32 magic 0x616b3432, int32 version, the seven
int32 fields with a positive vocab_size, uint8 shared_classifier; version 2 adds int32 group_size), then
version 1: f32 norms (attention norms of every layer, ffn norms, final norm), then the embedding and the
matrices (wq, wk, wv, wo, w1, w2, w3 of every layer, the classifier when not shared), all f32; version 2: the
same norms in f32, then each of those matrices as int8 codes followed by one f32 scale per group of
group_size values (Q8_0, w = code * scale). Their q and k rows are llama2.c's interleaved order already."""
import os
import struct

import numpy as np

from ..models import ModelError
from .source import Source, model_config

MAGIC = 0x616B3432
HEAD = 256


def open_llama2c(path):
    with open(path, "rb") as f:
        head = f.read(HEAD)
    if len(head) >= 8 and struct.unpack("<I", head[:4])[0] == MAGIC:
        return AK42Source(path, head)
    from kvedge.model.header import MAGIC_I8
    if head[:4] == MAGIC_I8:
        raise ModelError("%s: already a kvedge int8 file" % path)
    return V0Source(path)


class V0Source(Source):
    kind = "llama2.c checkpoint (v0)"

    def __init__(self, path):
        Source.__init__(self, path)
        from kvedge.model.header import CheckpointError, read_config
        from kvedge.model.f32file import layout
        try:
            self.cfg, _ = read_config(path)  # the header's ranges and the file's exact length
        except CheckpointError as e:
            raise ModelError(str(e))
        self._lay = layout(self.cfg)

    def _check(self, name, layer):
        pass  # the layout is fixed by the header, whose file length read_config checked

    def _tensor(self, name, layer):
        off = self._lay[name] if layer is None else self._lay[name][layer]
        n = int(np.prod(self.shape(name)))
        return np.fromfile(self.path, dtype="<f4", count=n, offset=off).reshape(self.shape(name))


class AK42Source(Source):
    def __init__(self, path, head):
        Source.__init__(self, path)
        if len(head) < HEAD:
            raise ModelError("%s: truncated header (%d of %d bytes)" % (path, len(head), HEAD))
        version = struct.unpack("<i", head[4:8])[0]
        if version not in (1, 2):
            raise ModelError("%s: llama2.c export version %d (known: 1 f32, 2 int8 Q8_0)" % (path, version))
        dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", head[8:36])
        shared = head[36]
        if shared not in (0, 1):
            raise ModelError("%s: shared_classifier flag is %d, expected 0 or 1" % (path, shared))
        if vocab <= 0:
            raise ModelError("%s: vocab_size %d, expected a positive number" % (path, vocab))
        self.cfg = model_config(path, dim, hidden, layers, heads, kv_heads, vocab, seq, bool(shared))
        self.version = version
        self.kind = "llama2.c export version %d (%s)" % (version, "f32" if version == 1 else "int8 Q8_0")
        self.group = 0
        if version == 2:
            self.group = struct.unpack("<i", head[37:41])[0]
            if self.group < 1 or self.group > 1 << 16:
                raise ModelError("%s: group_size %d, expected 1..65536" % (path, self.group))
        c = self.cfg
        # offsets: the norms first, then the matrices in export order
        at = HEAD
        self._off = {}
        for name in ("rms_att", "rms_ffn"):
            for l in range(c.n_layers):
                self._off[(name, l)] = at
                at += 4 * c.dim
        self._off[("rms_final", None)] = at
        at += 4 * c.dim
        mats = [("embedding", None)] + [(n, l) for n in ("wq", "wk", "wv", "wo", "w1", "w2", "w3")
                                        for l in range(c.n_layers)]
        if not c.shared_classifier:
            mats.append(("wcls", None))
        for key in mats:
            n = int(np.prod(self.shape(key[0])))
            if version == 2 and n % self.group:
                raise ModelError("%s: %s has %d values, not a multiple of group_size %d"
                                 % (path, self.label(*key), n, self.group))
            self._off[key] = at
            at += 4 * n if version == 1 else n + 4 * (n // self.group)
        size = os.path.getsize(path)
        if size != at:
            raise ModelError("%s: %d bytes, the header needs %d" % (path, size, at))

    def _check(self, name, layer):
        pass  # offsets and the file's exact length were checked from the header

    def _tensor(self, name, layer):
        off = self._off[(name, layer)]
        shape = self.shape(name)
        n = int(np.prod(shape))
        if self.version == 1 or name.startswith("rms"):
            return np.fromfile(self.path, dtype="<f4", count=n, offset=off).reshape(shape)
        codes = np.fromfile(self.path, dtype=np.int8, count=n, offset=off).astype(np.float32)
        scales = np.fromfile(self.path, dtype="<f4", count=n // self.group, offset=off + n)
        return (codes.reshape(-1, self.group) * scales[:, None]).reshape(shape)
