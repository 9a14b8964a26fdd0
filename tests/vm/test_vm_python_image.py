"""In the VM, Python runs from the read-only image (testbed/vm/image.py), not over 9p, and the
paths the image leaves out (the base installation's site-packages, its test suite) still work."""

import os
import sys
import sysconfig
from pathlib import Path

import pytest


def _mounts() -> dict[str, tuple[str, str]]:
    """{mount point: (fs type, mount options)} of this process, from /proc/self/mountinfo."""
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        mounts[fields[4].replace("\\040", " ")] = (fields[sep + 1], fields[5])
    return mounts


@pytest.mark.vm
def test_stdlib_and_venv_come_from_the_image_in_the_vm():
    if os.environ.get("AITB_IN_VM") is None:
        pytest.skip("the host kernel has netem: the vm tier runs on the host, without an image")
    mounts = _mounts()
    stdlib = sysconfig.get_path("stdlib")
    assert mounts.get(stdlib, ("", ""))[0] == "ext4", (stdlib, mounts.get(stdlib))
    assert mounts[stdlib][1].split(",")[0] == "ro"
    if sys.prefix != sys.base_prefix:
        assert mounts.get(sys.prefix, ("", ""))[0] == "ext4", (sys.prefix, mounts.get(sys.prefix))
    # Left out of the image, put back from the host's 9p root over the empty directories.
    for name in ("site-packages", "test"):
        path = Path(stdlib) / name
        if path.is_dir():
            assert mounts[str(path)][0] == "9p"
            assert any(path.iterdir())
