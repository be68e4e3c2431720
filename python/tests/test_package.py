"""The package's surface: stubs that match the native classes, the demo command."""

import ast
import pathlib
import subprocess
import sys

import vlc_compress as vc


def test_stubs_cover_every_public_native_member():
    stub = pathlib.Path(vc.__file__).with_name("_native.pyi")
    tree = ast.parse(stub.read_text())
    stubbed = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
            names |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
            stubbed[node.name] = names
    for cls in (vc.Context, vc.Compressor, vc.Index):
        public = {m for m in dir(cls) if not m.startswith("_")}
        assert public <= stubbed[cls.__name__], (cls.__name__, public - stubbed[cls.__name__])


def test_statuses_match_the_c_abi():
    assert vc.Status.OK == 0 and vc.Status.INVALID_ARGUMENT == 1 and vc.Status.CANCELLED == 18


def test_demo_runs(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "vlc_compress", "demo", "--n", "3000", "--queries", "20"],
        check=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    ).stdout
    assert "recall@10" in out
