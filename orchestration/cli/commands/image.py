"""``aitb image build TAG``: a minimal Python image for container hosts, built locally.

No registry is reachable from a lab machine, so images are made here: this host's Python,
its standard library, the installed distributions named with ``--package`` (and what they
require), files given with ``--file SRC:DEST`` and the shared libraries all of them need
(:mod:`testbed.containers.images`). Uses the running docker engine, else starts a ``dockerd``
for the
build and stops it by pid afterwards. Needs root. Bad input (a missing file, a DEST that is
not absolute, a distribution that is not installed) is refused before anything is built.
"""

# Modules that one command needs are imported inside it, when it runs, not at start-up:
# that keeps `aitb --help` and the other commands fast.

from __future__ import annotations

import importlib.metadata
import json
import re
import time
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer

from models.errors import SpecError
from models.owned import owned_tempdir

# docker's reference grammar (distribution/reference): path components of lowercase letters
# and digits joined by '.', '_', '__' or dashes, separated by '/', an optional registry host
# (with port) first; a tag of up to 128 word characters, dots and dashes
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# a first component is a registry host only if it is localhost, has a dot or a port
_HOST = r"(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+(?=:[0-9]))(?::[0-9]+)?"
_REFERENCE = re.compile(rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*"
                        r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")


def _tag(tag: str) -> str:
    """``tag`` if it is a valid docker image reference; SpecError (exit 2) otherwise."""
    if not _REFERENCE.fullmatch(tag):
        raise SpecError(f"image tag {tag!r}: not a valid docker reference (lowercase "
                        "name[:tag], e.g. aitb-gloo:1)")
    return tag


def _files(specs: list[str]) -> dict[str, bytes]:
    """``SRC:DEST`` options -> {image path: content}; SpecError naming the option."""
    out = {}
    for spec in specs:
        src, sep, dest = spec.rpartition(":")
        if not sep or not src or not PurePosixPath(dest).is_absolute():
            raise SpecError(f"--file {spec!r}: give SRC:DEST with an absolute DEST in the image")
        if not Path(src).is_file():
            raise SpecError(f"--file {spec!r}: {src} is not a readable file")
        out[dest] = Path(src).read_bytes()
    return out


def _packages(names: list[str]) -> list[str]:
    for name in names:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise SpecError(f"--package {name!r}: not installed in this Python "
                            "(pip install it first)") from None
    return names


def build(
    tag: Annotated[str, typer.Argument(help="Image tag, e.g. aitb-gloo:1.")],
    package: Annotated[list[str] | None, typer.Option(
        "--package", help="An installed distribution to copy (with its requirements); "
                          "repeatable.")] = None,
    file: Annotated[list[str] | None, typer.Option(
        "--file", help="SRC:DEST, a host file put at DEST in the image; repeatable.")] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild",
                                          help="Build even if the tag exists.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Build a minimal Python image (this host's interpreter) in the local docker engine."""
    from testbed.containers.dockerd import temporary_engine
    from testbed.containers.images import build_python_image

    tag = _tag(tag)
    extra, packages = _files(file or []), _packages(package or [])
    t0 = time.perf_counter()
    with owned_tempdir("image") as tmp, \
            temporary_engine(Path(tmp) / "dockerd.log") as cli:
        built = build_python_image(cli, tag, extra, packages, rebuild)
        size = cli.images.get(tag).attrs.get("Size")
    result = {"tag": tag, "built": built, "seconds": round(time.perf_counter() - t0, 2),
              "size_bytes": size}
    if as_json:
        typer.echo(json.dumps(result))
    else:
        typer.echo(f"{tag}: {'built' if built else 'already there (--rebuild to redo)'}, "
                   f"{(size or 0) / 1e6:.0f} MB, {result['seconds']} s")


def register(app: typer.Typer) -> None:
    """Add the ``image`` command group (``aitb image build``) to ``app``."""
    group = typer.Typer(help="Images for container hosts, built locally.", no_args_is_help=True)
    group.command("build")(build)
    app.add_typer(group, name="image")
