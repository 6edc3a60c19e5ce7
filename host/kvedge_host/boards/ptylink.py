"""What both virtual boards (kvedge_host.boards.sim's unix-port board and kvedge_host.boards.m3sim's emulated
Cortex-M3) share for their serial link and their filesystem: the folder a board's files live in by default, and
the non-blocking pty writes their relay loops make."""
import errno
import os


def default_fs(board):
    """The folder a virtual board keeps its filesystem in when none is given (XDG cache, per board)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kvedge", "sim", board)


def set_nonblocking(fd):
    os.set_blocking(fd, False)


def write_some(fd, buf):
    """Write up to 4 KB of buf to a non-blocking fd: the bytes written, 0 when it would block (or was
    interrupted), -1 when the other end is gone."""
    try:
        return os.write(fd, bytes(buf[:4096]))
    except BlockingIOError:
        return 0
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EINTR):
            return 0
        return -1
