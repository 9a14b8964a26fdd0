"""Minimal Python images built locally in seconds (no registry is reachable here, see
KERNEL.md "Docker engine"): ``FROM scratch`` plus this host's own Python interpreter, its
standard library (without tests, GUI and bundled pip), its extension modules, optionally
installed distributions (with everything they require), extra files, and every shared
library all of them need. ``aitb image build`` is its CLI (orchestration/cli/commands/image.py).

The libraries are found from the ELF files themselves, not from ``ldd`` text: pyelftools
reads each file's ``DT_NEEDED`` entries and its ``DT_RUNPATH``/``DT_RPATH`` (with ``$ORIGIN``
expanded), and the interpreter's ``PT_INTERP`` (the dynamic loader); a needed name is looked
up in those directories, then in the machine's multiarch and plain library directories (the
loader's default search path, ld.so(8)); the closure is followed to a fixed point. Every
file keeps its absolute path inside the image (so RUNPATHs and the interpreter's prefix still
hold), ``LD_LIBRARY_PATH`` names the library directories because the image has no
``ld.so.cache``, and ``PYTHONPATH`` the site directories of the copied distributions. The
image's command idles (``python3 -c "time.sleep(86400)"``), as a container host's must.

:func:`build_python_image` says whether it built the image, so a caller (tests, bench)
removes only what it made. Reads files, talks to the docker engine; needs root for that.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from packaging.requirements import Requirement

from models.errors import LabError

__all__ = ["TAG", "DEFAULT_LIB_DIRS", "interpreter", "shared_libraries", "package_files",
           "rootfs_files", "context", "build_python_image"]

TAG = f"aitb-python:{sys.version_info.major}.{sys.version_info.minor}"
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "tkinter",
              "turtledemo", "ensurepip", "lib2to3", "__pycache__"}
_MULTIARCH = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
DEFAULT_LIB_DIRS = (f"/lib/{_MULTIARCH}", f"/usr/lib/{_MULTIARCH}", "/lib64", "/usr/lib64",
                    "/lib", "/usr/lib")
IDLE_CMD = ["/bin/python3", "-c", "import time; time.sleep(86400)"]


def interpreter() -> Path:
    """The real file of the running interpreter (a venv's python is a symlink to it)."""
    return Path(os.path.realpath(sys._base_executable))  # noqa: SLF001 - the venv's base


def _dynamic(path: Path) -> tuple[list[str], list[str], str | None]:
    """(DT_NEEDED names, RUNPATH or RPATH directories with $ORIGIN expanded, PT_INTERP)."""
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        interp = next((seg.get_interp_name() for seg in elf.iter_segments()
                       if seg["p_type"] == "PT_INTERP"), None)
        needed, runpath, rpath = [], [], []
        for sec in elf.iter_sections():
            if not isinstance(sec, DynamicSection):
                continue
            for tag in sec.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath += tag.runpath.split(":")
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath += tag.rpath.split(":")
    origin = str(path.parent)
    dirs = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
            for d in (runpath or rpath) if d]
    return needed, dirs, interp


def _find(name: str, dirs: Iterable[str], wanted_by: Path) -> Path:
    for d in [*dirs, *DEFAULT_LIB_DIRS]:
        candidate = Path(d) / name
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{wanted_by} needs {name}, which is in none of "
                            f"{', '.join([*dirs, *DEFAULT_LIB_DIRS])}")


def shared_libraries(elves: Iterable[Path]) -> set[Path]:
    """The closure of shared libraries (and dynamic loaders) that the ELF files ``elves``
    need, each as the path the loader finds it under. Raises FileNotFoundError naming the
    file and the library when one cannot be found."""
    todo, seen = list(elves), set()
    while todo:
        path = todo.pop()
        needed, dirs, interp = _dynamic(path)
        found = [_find(n, dirs, path) for n in needed] + ([Path(interp)] if interp else [])
        for lib in found:
            if lib not in seen:
                seen.add(lib)
                todo.append(lib)
    return seen


def _stdlib_files(stdlib: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith("config-")]
        for name in files:
            if not name.startswith("_tkinter"):  # Tk would pull in X11
                yield Path(root) / name


def _is_elf_library(path: Path) -> bool:
    return path.suffix == ".so" or ".so." in path.name


def rootfs_files(extra_files: Iterable[Path] = ()) -> list[Path]:
    """Every host file the image holds: interpreter, stdlib (see module doc), ``extra_files``
    (e.g. :func:`package_files`) and the libraries all of them need."""
    exe = interpreter()
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    files = [exe, *_stdlib_files(stdlib), *extra_files]
    elves = [exe, *(f for f in files if _is_elf_library(f))]
    return files + sorted(shared_libraries(elves) - set(files))


def _requirement_names(dist: importlib.metadata.Distribution) -> list[str]:
    """Names of what ``dist`` requires unconditionally here (markers evaluated, no extras)."""
    out = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req.name)
    return out


def package_files(names: Iterable[str]) -> tuple[list[Path], set[Path]]:
    """Files (no ``__pycache__``) of the installed distributions ``names`` and of everything
    they require, recursively, and the site directories they live in (for PYTHONPATH).
    Raises PackageNotFoundError naming a distribution that is not installed."""
    todo, seen, files, sites = list(names), set(), [], set()
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        dist = importlib.metadata.distribution(name)
        todo += _requirement_names(dist)
        sites.add(Path(dist.locate_file("")))
        for f in dist.files or []:
            path = Path(dist.locate_file(f))
            if "__pycache__" not in path.parts and path.is_file():
                files.append(path.absolute())
    return files, sites


def _dockerfile(lib_dirs: Iterable[str], python_path: Iterable[str]) -> bytes:
    cmd = ", ".join(f'"{a}"' for a in IDLE_CMD)
    env = f"ENV LD_LIBRARY_PATH={':'.join(lib_dirs)}\n"
    if python_path:
        env += f"ENV PYTHONPATH={':'.join(python_path)}\n"
    return f"FROM scratch\nCOPY rootfs/ /\n{env}CMD [{cmd}]\n".encode()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def context(extra: dict[str, bytes] | None = None, packages: Iterable[str] = ()) -> IO[bytes]:
    """The build context as a tar in a temporary file: Dockerfile and rootfs/ (files at their
    absolute paths, symlinks stored as the files they point to, /bin/python3 -> the
    interpreter, /tmp); ``extra``: more files, image path -> content (mode 0644);
    ``packages``: installed distributions copied with their requirements (on PYTHONPATH)."""
    pkg_files, sites = package_files(packages)
    files = rootfs_files(pkg_files)
    lib_dirs = sorted({str(f.parent) for f in files if _is_elf_library(f)
                       and "site-packages" not in f.parts} | set(DEFAULT_LIB_DIRS[:2]))
    buf = tempfile.TemporaryFile()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_bytes(tar, "Dockerfile", _dockerfile(lib_dirs, sorted(map(str, sites))))
        for f in files:
            tar.add(os.path.realpath(f), arcname=f"rootfs{f}", recursive=False)
        link = tarfile.TarInfo("rootfs/bin/python3")
        link.type, link.linkname = tarfile.SYMTYPE, str(interpreter())
        tar.addfile(link)
        tmp = tarfile.TarInfo("rootfs/tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
        for name, data in (extra or {}).items():
            _add_bytes(tar, f"rootfs{name}", data)
    buf.seek(0)
    return buf


def build_python_image(cli: Any, tag: str = TAG, extra: dict[str, bytes] | None = None,
                       packages: Iterable[str] = (), rebuild: bool = False) -> bool:
    """Build ``tag`` (see :func:`context`) in the engine of ``cli`` unless it is there (or
    ``rebuild``); True if built here (the caller then removes it). Raises LabError naming the
    tag when a distribution is not installed, a library cannot be found, or docker refuses."""
    import docker

    if not rebuild:
        try:
            cli.images.get(tag)
            return False
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as exc:  # e.g. an invalid reference
            raise LabError(f"image {tag}: {exc}") from None
    try:
        with context(extra, packages) as ctx:
            cli.images.build(fileobj=ctx, custom_context=True, tag=tag, rm=True)
    except importlib.metadata.PackageNotFoundError as exc:
        raise LabError(f"image {tag}: distribution {exc} is not installed in this "
                       "Python") from None
    except (FileNotFoundError, docker.errors.DockerException) as exc:
        raise LabError(f"image {tag}: {exc}") from exc
    return True
