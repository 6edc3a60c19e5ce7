"""ROMFS images (MicroPython >= 1.25: a read-only filesystem in a flash partition whose files can be memory-mapped)
with every file's data 4-byte aligned, and putting weights into a board's ROMFS.

Why our own image writer: kvedge reads int8 rows and their f32 scales in place (kvedge.model.checkpoint's "rom"
placement); a float load from an unaligned address faults on Cortex-M0+ and Xtensa, and `mpremote romfs build`
places file data wherever the headers end. The format is MicroPython's (extmod/vfs_rom.c): records of a varint
kind, a varint length and a payload; a file is a name and a verbatim data record; leading 0x80 bytes are zero
digits of a varint, which is how the data of each file is moved to a multiple of 4. Lengths are written 4 bytes
wide, so a record's header size does not depend on what it holds.

Deploying is mpremote's: `mpremote romfs deploy IMAGE` writes the partition."""
import hashlib
import os
import subprocess
import tempfile

from .deploy import DeployError, inventory, mpremote, mpremote_exe

HEADER = b"\xd2\xcd\x31"
KIND_DATA, KIND_DIR, KIND_FILE = 2, 4, 5
ALIGN = 4
ROM = "/rom"


def _uint(v, width=0):
    out = [v & 0x7F]
    v >>= 7
    while v:
        out.insert(0, 0x80 | (v & 0x7F))
        v >>= 7
    while len(out) < width:
        out.insert(0, 0x80)
    return bytes(out)


def _tree(files):
    """{name: host path or sub-tree} from [(host path, path inside the image)]."""
    root = {}
    for src, rel in files:
        parts = [p for p in rel.strip("/").split("/") if p]
        node = root
        for d in parts[:-1]:
            node = node.setdefault(d, {})
            if not isinstance(node, dict):
                raise DeployError("ROMFS: %s is both a file and a folder" % d)
        if parts[-1] in node:
            raise DeployError("ROMFS: %s given twice" % rel)
        node[parts[-1]] = src
    return root


def image(files):
    """The image bytes holding `files` [(host path, path inside the image)], each file's data 4-byte aligned
    (from the image's start: partitions are aligned far more)."""
    buf = bytearray(HEADER + bytes(4))

    def fill(at, n):
        buf[at:at + 4] = _uint(n, 4)

    def emit(node):
        for name in sorted(node):
            what = node[name]
            kind = KIND_DIR if isinstance(what, dict) else KIND_FILE
            buf.extend(_uint(kind))
            at = len(buf)
            buf.extend(bytes(4))
            nm = name.encode("ascii")
            buf.extend(_uint(len(nm)) + nm)
            if kind == KIND_DIR:
                emit(what)
            else:
                with open(what, "rb") as f:
                    data = f.read()
                buf.extend(_uint(KIND_DATA))
                w = 4
                while (len(buf) + w) % ALIGN:
                    w += 1
                buf.extend(_uint(len(data), w))
                buf.extend(data)
            fill(at, len(buf) - at - 4)
    emit(_tree(files))
    fill(len(HEADER), len(buf) - len(HEADER) - 4)
    return bytes(buf)


def write(files, path):
    with open(path, "wb") as f:
        f.write(image(files))
    return path


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def ensure(port, files, say=None):
    """Make the board's /rom hold `files` (host paths, at the top of the image); returns their board paths.
    Nothing is written when /rom already holds them (a virtual board started with them, or an earlier deploy).
    Refuses a board without ROMFS, and one whose /rom holds other files (a deploy replaces the whole partition)."""
    want = {ROM + "/" + os.path.basename(f): _sha(f) for f in files}
    have, _ = inventory(port, [ROM])
    if all(have.get(p) == h for p, h in want.items()):
        return sorted(want, key=lambda p: [os.path.basename(f) for f in files].index(p[len(ROM) + 1:]))
    out = mpremote(port, ["exec", "import vfs\nprint('KVROM', hasattr(vfs, 'rom_ioctl'))"])
    if "KVROM True" not in out:
        raise DeployError("the board's firmware has no ROMFS (MicroPython >= 1.25 built with MICROPY_VFS_ROM): "
                          "leave out --rom, the weights are then read from its filesystem row by row")
    others = sorted(p for p in have if p not in want)
    if others:
        raise DeployError("the board's ROMFS holds other files (%s); a ROMFS deploy replaces the whole partition"
                          % ", ".join(others[:5]))
    with tempfile.TemporaryDirectory(prefix="kvedge-romfs-") as tmp:
        img = write([(f, os.path.basename(f)) for f in files], os.path.join(tmp, "weights.romfs"))
        if say:
            say("writing %d bytes into the board's ROMFS partition (mpremote romfs deploy)" % os.path.getsize(img))
        p = subprocess.run([mpremote_exe(), "connect", port, "romfs", "deploy", img], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=600)
        if p.returncode:
            raise DeployError("mpremote romfs deploy failed: %s" % p.stdout.decode(errors="replace").strip()[-500:])
    have, _ = inventory(port, [ROM], resume=False)  # a soft reset mounts the new image
    if not all(have.get(p) == h for p, h in want.items()):
        raise DeployError("mpremote romfs deploy said it wrote the image, but the board's /rom does not hold it "
                          "(an emulated board's ROMFS cannot be written: start it with the files, kvedge sim --rom "
                          "DIR)")
    return [ROM + "/" + os.path.basename(f) for f in files]
