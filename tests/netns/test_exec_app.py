"""``Lab.exec_app`` on a container host (docker exec, argv from the Python image) and on a
namespace host (argv from this host) in one lab; the container keys command, environment
and binds reach the container; apps left running are ended by pid at teardown."""

from __future__ import annotations

import sys
import textwrap

import pytest
from container_image import PYTHON_TAG as TAG
from container_image import engine_with_image

from testbed.containers.hosts import run_containers
from testbed.containers.images import build_python_image
from testbed.lab.registry import pid_alive
from topologies import load_topology

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    yield from engine_with_image(tmp_path_factory, lambda cli: build_python_image(cli, TAG), TAG)


PROBE = textwrap.dedent("""\
    import os, sys
    print("env", os.environ.get("FROM_TOPO"), os.environ.get("FROM_CALL"))
    print("data", open("/data/in.txt").read())
    try:
        open("/data/out.txt", "w")
        print("write ok")
    except OSError as exc:
        print("write refused", exc.errno)
    print("exe", sys.executable)
    sys.exit(7)
""")


def test_exec_app_in_container_and_namespace_host(labs, engine, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("hello")
    topo = tmp_path / "lab.yaml"
    topo.write_text(textwrap.dedent(f"""\
        name: execapp
        nodes:
          c1: {{kind: host, image: {TAG!r}, environment: {{FROM_TOPO: t1}},
                binds: {{{data}: /data}},
                command: [python3, -c, "import time; time.sleep(3600)"]}}
          h1: {{kind: host}}
        links:
          - {{endpoints: [c1, h1], rate: 100Mbit}}
    """))
    with labs(load_topology(topo)) as lab:
        box = engine.cli.containers.get(lab.netns_name("c1"))
        assert box.attrs["Config"]["Cmd"] == ["python3", "-c", "import time; time.sleep(3600)"]
        app = lab.exec_app("c1", ["python3", "-c", PROBE], env={"FROM_CALL": "x"},
                           log=tmp_path / "c1.log")
        assert app.wait(30) == 7
        text = (tmp_path / "c1.log").read_text()
        assert "env t1 x" in text and "data hello" in text and "exe /bin/python3" in text
        assert "write refused 30" in text  # EROFS: binds are read-only unless ':rw'
        assert not (data / "out.txt").exists()
        # the container's app reaches the namespace host's app over the lab link
        server = lab.exec_app("h1", [sys.executable, "-c", "import socket; s = socket."
                                     "create_server(('0.0.0.0', 5302)); c, _ = s.accept(); "
                                     "print(len(c.recv(100)))"], log=tmp_path / "h1.log")
        client = lab.exec_app("c1", ["python3", "-c", "import socket, time\nfor _ in "
                                     "range(100):\n  try:\n    s = socket.create_connection(("
                                     f"'{lab.plan.address_of('h1')}', 5302)); break\n  except"
                                     " OSError: time.sleep(0.05)\ns.sendall(b'x' * 42)"],
                              log=tmp_path / "c1b.log")
        assert client.wait(30) == 0 and server.wait(30) == 0
        assert (tmp_path / "h1.log").read_text().strip() == "42"
        # kill ends it by pid; one more left running is ended by the teardown
        sleeper = lab.exec_app("c1", ["python3", "-c", "import time; time.sleep(600)"])
        assert sleeper.poll() is None and pid_alive(sleeper.pid, sleeper.start)
        sleeper.kill()
        assert sleeper.returncode is not None and not pid_alive(sleeper.pid, sleeper.start)
        left = lab.exec_app("c1", ["python3", "-c", "import time; time.sleep(600)"])
        recs = [r for r in lab.registry.records() if r.get("exec")]
        assert [r["pid"] for r in recs][-1] == left.pid and recs[-1]["node"] == "c1"
        run_id = lab.run_id
    assert not pid_alive(left.pid, left.start)
    assert run_containers(run_id) == []


def test_shell_string_is_refused(labs, tmp_path):
    topo = tmp_path / "lab.yaml"
    topo.write_text("name: execsh\nnodes: {h1: {kind: host}, h2: {kind: host}}\n"
                    "links: [{endpoints: [h1, h2]}]\n")
    with labs(load_topology(topo)) as lab, pytest.raises(TypeError, match="shell string"):
        lab.exec_app("h1", "echo hi")


def test_image_build_cli(engine, tmp_path):
    import json
    import subprocess

    tag = "aitb-test-cli:1"
    src = tmp_path / "x.txt"
    src.write_text("from the host")
    out = subprocess.run([sys.executable, "-m", "orchestration.cli",
     "image", "build", tag, "--file",
                          f"{src}:/opt/x.txt", "--json"], capture_output=True, text=True,
                         timeout=300)
    try:
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["built"] is True
        logs = engine.cli.containers.run(tag, ["python3", "-c", "import ssl, sqlite3; "
                                               "print(open('/opt/x.txt').read())"],
                                         network_mode="none", remove=True)
        assert logs.decode().strip() == "from the host"
    finally:
        engine.cli.images.remove(tag, force=True)
