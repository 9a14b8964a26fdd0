"""Every vm test marked ``native_twin(nodeid)`` (left out of the VM by scripts/run_vm_tier.py
where the host lacks netem) names a netns test that exists, calls the vm test's own checks
and is not itself in the vm tier: a twin that is renamed or removed must fail here, or the
vm test's checks would silently run nowhere."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _twins() -> dict[str, str]:
    """{vm test nodeid: twin nodeid} from the ``@pytest.mark.native_twin(...)`` decorators."""
    out = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and ast.unparse(dec.func) == "pytest.mark.native_twin":
                    out[f"{path.relative_to(TESTS.parent)}::{node.name}"] = \
                        ast.literal_eval(dec.args[0])
    return out


def _module_marks(tree: ast.Module) -> str:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return ast.unparse(node.value)
    return ""


def test_the_twinned_vm_tests_are_the_end_to_end_ones():
    assert {k.split("::")[0] for k in _twins()} == {
        "tests/vm/test_quickstart_vm.py", "tests/vm/test_dci_delay_iteration.py",
        "tests/vm/test_mininet_run_vm.py"}


def test_every_twin_exists_is_a_netns_test_and_runs_the_vm_tests_checks():
    twins = _twins()
    assert twins
    for vm_id, twin_id in twins.items():
        vm_file, vm_name = vm_id.split("::")
        twin_file, twin_name = twin_id.split("::")
        tree = ast.parse((TESTS.parent / twin_file).read_text())
        marks = _module_marks(tree)
        assert "pytest.mark.netns" in marks and "pytest.mark.vm" not in marks, (twin_id, marks)
        fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == twin_name]
        assert fn, f"{vm_id}: its twin {twin_id} does not exist"
        # the twin imports the vm test's module and calls into it (its checks, one copy)
        vm_module = Path(vm_file).stem
        body = ast.unparse(fn[0]) + ast.unparse(tree)
        assert vm_module in body, (twin_id, vm_module)
        vm_tree = ast.parse((TESTS.parent / vm_file).read_text())
        assert "pytest.mark.vm" in _module_marks(vm_tree), vm_id
