"""What goes onto an emulated board before it starts: files staged as on the board (compiled to .mpy for its
-march), its RAM disk as a littlefs2 image loaded into guest RAM, and its ROMFS image (kvedge_host.boards.romfs)."""
import os
import shutil
import tempfile

from .deploy import DeployError, compile_one as compile_to  # noqa: F401 (compile_to: m3board's name for it)
from .m3firmware import M3Missing
from .m3machines import DISK_BLOCK, DISK_BLOCKS, DISK_NAME, M3, disk_module


def stage(folder, pairs, march=None, mpy=True):
    """Put files into `folder` laid out as on the board: pairs are (host path, board path). With mpy=True every
    .py becomes an .mpy (-march=ARCH: viper/native code is machine code for the board); other files are
    copied. Returns the board paths written."""
    out = []
    for src, rel in pairs:
        if mpy and rel.endswith(".py"):
            rel = rel[:-3] + ".mpy"
            compile_to(src, os.path.join(folder, rel), rel[:-4] + ".py", march)
        else:
            dst = os.path.join(folder, rel)
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
            shutil.copyfile(src, dst)
        out.append(rel)
    return out


def stage_package(folder, march="armv6m", mpy=True, extra=(), layout=None):
    """The device package (kvedge/...) and `extra` pairs into `folder`, plus the machine's RAM-disk module."""
    from .deploy import device_sources, for_arch
    written = stage(folder, for_arch(list(device_sources()) + list(extra), march), march, mpy)
    write_disk_module(folder, march if mpy else None, layout)
    return written


def write_disk_module(folder, march=None, layout=None):
    """The machine's RAM-disk module (as .mpy when march is given: no compile on the board)."""
    src = os.path.join(folder, DISK_NAME + ".py")
    with open(src, "w") as f:
        f.write(disk_module(layout))
    if march is not None:
        compile_to(src, os.path.join(folder, DISK_NAME + ".mpy"), DISK_NAME + ".py", march)
        os.remove(src)


def tree_files(folder, board_root, exts=(".py", ".mpy", ".json", ".bin")):
    """(host path, board path) of the files under `folder` with these endings, at board_root/relative path."""
    out = []
    for d, subdirs, names in os.walk(folder):
        subdirs[:] = sorted(x for x in subdirs if x not in ("__pycache__", "node_modules") and x[0] != ".")
        for n in sorted(names):
            if n.endswith(exts):
                p = os.path.join(d, n)
                out.append((p, board_root.rstrip("/") + "/" + os.path.relpath(p, folder).replace(os.sep, "/")))
    return out


def _littlefs():
    try:
        import littlefs
    except ImportError:
        raise M3Missing("littlefs-python is not installed (pip install -r requirements.txt)")
    return littlefs


def _lfs(littlefs, blocks=DISK_BLOCKS, **kw):
    # the geometry and buffer sizes of vfs.VfsLfs2 over DISK_MODULE's RamDisk (readsize 32, progsize 256 as
    # the rp2 and esp32 ports mount their flash, lookahead 32, cache min(block, 4 * progsize))
    return littlefs.LittleFS(block_size=DISK_BLOCK, block_count=blocks, read_size=32, prog_size=256,
                             cache_size=1024, lookahead_size=32, **kw)


def build_disk(image, files, march=None, mpy=False, work=None, layout=None):
    """A littlefs2 image of the RAM disk holding `files` [(host path, absolute board path)], built on the host
    and loaded into guest RAM when qemu starts: files reach the board without crossing the emulated UART. With
    mpy=True .py files go as .mpy for `march` (compiled in `work`). layout: the machine (its disk's size)."""
    from .deploy import for_arch
    littlefs = _littlefs()
    fs = _lfs(littlefs, (layout or M3).disk_blocks)
    tmp = None
    try:
        for src, dst in for_arch(files, march):  # the files a chip of `march` is given
            if not dst.startswith("/"):
                dst = "/" + dst
            if mpy and dst.endswith(".py"):
                if tmp is None:
                    tmp = tempfile.mkdtemp(prefix="kvedge-mpy-", dir=work)
                out = os.path.join(tmp, "%d.mpy" % len(os.listdir(tmp)))
                compile_to(src, out, dst.lstrip("/"), march)
                src, dst = out, dst[:-3] + ".mpy"
            folder = dst.rsplit("/", 1)[0]
            if folder:
                fs.makedirs(folder, exist_ok=True)
            with open(src, "rb") as f, fs.open(dst, "wb") as g:
                g.write(f.read())
        data = bytes(fs.context.buffer)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    # blocks never written after the last used one need not be loaded (littlefs never reads a free block)
    n = len(data) // DISK_BLOCK
    erased = b"\xff" * DISK_BLOCK
    while n and data[(n - 1) * DISK_BLOCK:n * DISK_BLOCK] in (erased, bytes(DISK_BLOCK)):
        n -= 1
    with open(image, "wb") as f:
        f.write(data[:max(n, 2) * DISK_BLOCK])
    return image


def read_disk(image, layout=None):
    """{absolute board path: bytes} of every file in a RAM-disk image (e.g. dumped from a running board)."""
    littlefs = _littlefs()
    blocks = (layout or M3).disk_blocks
    with open(image, "rb") as f:
        data = f.read()
    data = data + bytes(DISK_BLOCK * blocks - len(data))
    fs = _lfs(littlefs, blocks, mount=False)
    fs.context.buffer[:] = data
    fs.mount()
    out = {}
    for root, _, names in fs.walk("/"):
        for n in names:
            p = root.rstrip("/") + "/" + n
            with fs.open(p, "rb") as f:
                out[p] = f.read()
    return out


def build_romfs(folder, image, layout=None):
    """A ROMFS image of `folder` (files as they are: stage() compiled what had to be compiled), each file's data
    4-byte aligned (kvedge_host.boards.romfs) so that weights can be read in place."""
    from . import romfs
    files = []
    for d, subdirs, names in os.walk(folder):
        subdirs.sort()
        for n in sorted(names):
            p = os.path.join(d, n)
            files.append((p, os.path.relpath(p, folder).replace(os.sep, "/")))
    romfs.write(files, image)
    size = os.path.getsize(image)
    slot = (layout or M3).romfs_max
    if size > slot:
        raise DeployError("ROMFS image %s is %d bytes; the board's ROMFS slot holds %d" % (image, size, slot))
    return image

