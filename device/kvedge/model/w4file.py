# kvedge's int4 weights file, stated once: its header (its sizes: kvedge.w4sizes; its layout:
# kvedge.model.header.i4_layout, which imports this module: this one imports nothing of it). Kept out of
# kvedge.model.checkpoint (which every run imports): a board running f32 or int8 weights does not compile it.
#
#   "KVW4", version, group size (GROUP), llama2.c's 28-byte header (kvedge.model.header.parse_header);
#   then, in llama2.c's tensor order (header.i8_layout), each matrix [rows, cols] as
#     rows * G f16 scales (G = ceil(cols / GROUP) groups a row, row-major), zero padding to 4 bytes,
#     rows * G * GROUP / 2 bytes of codes: two's complement nibbles, column 2i of a group in the low nibble of its
#     byte i and 2i+1 in the high one; a row's last group padded with zero codes;
#   and each norm as f32 gains.  w[r][c] ~ code * scale[r][c // GROUP].
# Why groups of 32: groups of 16 measured a lower perplexity cost on stories260K (docs/model.md, "int4 weights")
# but store 20 bytes per 32 weights instead of 18 (+11 % flash and reads) and take a scale step every 16 MACs.
import struct

from kvedge.errors import CheckpointError
from kvedge.w4sizes import GROUP, body_bytes

MAGIC = b"KVW4"
VERSION = 1
HEADER_BYTES = 4 + 4 + 4 + 28  # magic, version, group size, llama2.c's header


def file_bytes(cfg):
    """The exact length of an int4 file with this header (kvedge.model.header.file_bytes)."""
    p = cfg.params()
    return HEADER_BYTES + body_bytes(p) + 4 * p["norms"]


def header(path):
    """llama2.c's 28 header bytes of an int4 file, after its version and group size are checked
    (CheckpointError: a file this runner does not read)."""
    with open(path, "rb") as f:
        head = f.read(HEADER_BYTES)
    if len(head) < 12:
        raise CheckpointError("truncated header: %d of %d bytes" % (len(head), HEADER_BYTES))
    ver, group = struct.unpack("<ii", head[4:12])
    if ver != VERSION:
        raise CheckpointError("kvedge int4 file version %d, expected %d" % (ver, VERSION))
    if group != GROUP:
        raise CheckpointError("kvedge int4 file of groups of %d columns, this runner reads %d" % (group, GROUP))
    return head[12:]
