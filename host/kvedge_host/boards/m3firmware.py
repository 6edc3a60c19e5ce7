"""Which emulated machine and firmware image stand for a board profile, and whether they are here: the firmware
folders ($KVEDGE_M3_FIRMWARE and its kin, else ../shared/runtimes), the image with a heap, qemu itself, the
machine for a profile (layout_for), the heap of the image a profile runs on (m3_heap), whether weights go into the
ROMFS slot, and the -march of .mpy files for the machine. M3Missing: the emulated board cannot run here."""
import os
import shutil

from .. import profiles
from .deploy import DeployError, mpremote_exe
from .m3machines import DISK_BLOCK, LAYOUTS, M3, M3_FAMILY, PSRAM_LAYOUTS
from ..paths import SHARED_RUNTIMES


class M3Missing(RuntimeError):
    """The emulated board cannot run here (no qemu, no firmware image for the heap): the message says why."""



def firmware_dir(layout=None):
    layout = layout or M3
    d = os.environ.get(layout.firmware_env)
    if d:
        return os.path.abspath(d)
    return os.path.join(SHARED_RUNTIMES, layout.firmware_sub)


def firmware_images(folder=None, layout=None):
    """{heap bytes: image path} of the machine's firmware images in the folder."""
    layout = layout or M3
    folder = folder or firmware_dir(layout)
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    out = {}
    for n in names:
        m = layout.image.match(n)
        if m:
            out[int(m.group(1))] = os.path.join(folder, n)
    return out


def firmware_for(heap, layout=None):
    """The machine's image whose heap is exactly `heap` bytes; M3Missing says why there is none."""
    layout = layout or M3
    folder = firmware_dir(layout)
    imgs = firmware_images(folder, layout)
    if heap in imgs:
        return imgs[heap]
    if not os.path.isdir(folder):
        raise M3Missing("no %s firmware folder %s (set %s to the folder of %s images)"
                        % (layout.cpu, folder, layout.firmware_env, layout.image_name))
    if not imgs:
        raise M3Missing("no %s image in %s" % (layout.image_name, folder))
    raise M3Missing("no %s firmware image with a %d-byte heap in %s (images there: %s)"
                    % (layout.cpu, heap, folder, ", ".join(str(h) for h in sorted(imgs))))


def qemu_exe(layout=None):
    name, package = (layout or M3).qemu
    exe = shutil.which(name)
    if not exe:
        raise M3Missing("%s is not installed (Debian: apt-get install %s; tools/setup.sh installs it when run as "
                        "root)" % (name, package))
    return exe


def heap_of(board=None, heap=None):
    if heap:
        return int(heap)
    return int(profiles.load(board or "rp2040")["heap_bytes"])


def missing(board=None, heap=None, layout=None):
    """None when the emulated machine (default the Cortex-M3) can run with this profile's (or this) heap, else
    the reason."""
    try:
        qemu_exe(layout)
        firmware_for(heap_of(board, heap), layout)
        mpremote_exe()
    except (M3Missing, DeployError) as e:
        return str(e)
    return None


def layout_for(board=None, heap=None):
    """The emulated machine that stands for a profile: the one whose firmware's own -march is the profile's
    (the RP2040's armv6m on the Cortex-M0, the RP2350's armv7emsp on the single-precision Cortex-M7), or that
    stands for it (the ESP32s' xtensawin on the Xtensa lx106, which runs xtensa, its call0 sibling), when it has
    an image with this heap and its qemu is installed; else the Cortex-M3 with its heap in PSRAM when one of those
    images has it (the PSRAM profiles); else the Cortex-M3 (the fallback: standing_in says why)."""
    march = profiles.load(board or "rp2040").get("mpy_march")
    heap = heap_of(board, heap)
    for lay in _own_layouts(march):
        if heap in firmware_images(layout=lay) and shutil.which(lay.qemu[0]):
            return lay
    return psram_layout(heap) or M3


def _own_layouts(march):
    """The machines outside the Cortex-M3's family whose firmware runs this -march's code, or its stand-in's."""
    return [lay for lay in LAYOUTS.values()
            if lay not in M3_FAMILY and (lay.marches[0] == march or march in lay.stands_for)]


def standing_in(board=None, heap=None):
    """None when the profile runs on its own machine (or has none: the Cortex-M3 is its machine), else why the
    Cortex-M3 stands in for it (no firmware image with this heap, or no qemu for that machine): the fallback's
    reason, for kvedge demo, sim and footprint to say and tests to skip with."""
    march = profiles.load(board or "rp2040").get("mpy_march")
    heap = heap_of(board, heap)
    own = _own_layouts(march)
    if not own or layout_for(board, heap) in own:
        return None
    why = []
    for lay in own:
        try:
            qemu_exe(lay)
            firmware_for(heap, lay)
        except M3Missing as e:
            why.append(str(e))
    return "; ".join(why) or None


def fallback_note(board=None, heap=None):
    """The line kvedge demo, sim and footprint print when the Cortex-M3 runs in the place of the profile's own
    stand-in (an ESP32 without qemu-system-xtensa or ../shared's lx106 images), else None."""
    why = standing_in(board, heap)
    if why is None:
        return None
    march = profiles.load(board or "rp2040").get("mpy_march")
    own = " or ".join("the %s" % lay.cpu for lay in _own_layouts(march))
    return ("the emulated Cortex-M3 stands in for %s, as armv7m .mpy: %s (its own stand-in) cannot run here: %s"
            % (board, own, why))


def m3_images():
    """{heap bytes: image path} of every Cortex-M3 image, those with the heap in PSRAM included."""
    out = {}
    for lay in M3_FAMILY:
        out.update(firmware_images(layout=lay))
    return out


def psram_layout(heap):
    """The Cortex-M3 layout whose PSRAM-heap image has exactly `heap` bytes, or None."""
    for lay in PSRAM_LAYOUTS:
        if heap in firmware_images(layout=lay):
            return lay
    return None


ROM_SHARE = 2  # weights above 1/ROM_SHARE of the emulated board's RAM disk go into its ROMFS image (kvedge demo)


def m3_heap(prof, board=None, weights_bytes=0):
    """The heap of the emulated board's image for a profile: its own when an image has it (on the machine that
    stands for it, or the Cortex-M3), else (a PSRAM profile) the image its footprint was measured on; for weights
    that go into the ROMFS image (in_rom) and do not fit that image's ROMFS slot, the smaller-heap image with the
    largest slot that holds them (a PSRAM profile's 16 MB of flash hold what the emulated board's PSRAM, split
    between heap and ROMFS slot, cannot at its full heap). None when none is here (the caller says why)."""
    imgs = set(m3_images())
    if board:
        imgs |= set(firmware_images(layout=layout_for(board)))
    if prof["heap_bytes"] in imgs:
        heap = prof["heap_bytes"]
    else:
        img = (prof.get("footprint") or {}).get("heap_image")
        heap = img if img in imgs and img < prof["heap_bytes"] else None
    if heap is None or not in_rom(weights_bytes, layout_for(board, heap)) or \
            rom_fits(weights_bytes, layout_for(board, heap)):
        return heap
    slots = []
    for h in imgs:
        lay = layout_for(board, h)
        if h < heap and lay in M3_FAMILY and rom_fits(weights_bytes, lay):
            slots.append((lay.romfs_max, h))
    return max(slots)[1] if slots else heap


def in_rom(weights_bytes, layout):
    """Whether the emulated board's weights go into its ROMFS image: above 1/ROM_SHARE of its RAM disk."""
    return weights_bytes * ROM_SHARE > layout.disk_blocks * DISK_BLOCK


def rom_fits(weights_bytes, layout):
    """Whether the layout's ROMFS slot holds the weights beside the RAM-disk module (64 KB kept for it)."""
    return weights_bytes + 65536 <= layout.romfs_max


def march_for(board=None, layout=None):
    """The -march for .mpy files on this emulated machine: the profile's own when the firmware loads it
    (rp2040's armv6m), else the CPU's (armv7m on the Cortex-M3: xtensawin or armv7emsp machine code cannot run
    there; armv6m on the Cortex-M0)."""
    layout = layout or M3
    m = profiles.load(board or "rp2040").get("mpy_march")
    if m in layout.marches:
        return m
    return "armv7m" if layout in M3_FAMILY else layout.marches[0]

