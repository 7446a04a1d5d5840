"""A missing optional dependency is one line naming the extra that installs it (exit 2), not a
traceback. Missing modules are simulated with sys.modules[name] = None, which makes every
import of them fail as if they were not installed."""

import sys

import pytest

from helpers import FAST_TRAIN, cli
from lbhash.errors import InputError, require_extra


def hide(monkeypatch, *names):
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def one_line_error(result, expected):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {expected}"), lines[0]


SERVE = "lbhash serve needs the 'serve' extra: pip install 'lbhash[serve]'"
MILVUS = "--backend milvus needs the 'milvus' extra: pip install 'lbhash[milvus]'"
TENSORBOARD = "--logger tensorboard needs the 'tensorboard' extra: pip install 'lbhash[tensorboard]'"


@pytest.mark.parametrize("module", ["uvicorn", "fastapi"])
def test_serve_without_the_serve_extra(tmp_path, monkeypatch, module):
    hide(monkeypatch, module)
    result = cli("serve", tmp_path / "idx", "--port", "0")
    one_line_error(result, SERVE)
    assert f"(no module {module})" in result.output


def test_milvus_backend_without_pymilvus(monkeypatch):
    hide(monkeypatch, "pymilvus")
    one_line_error(cli("index", "info", "lbhash", "--backend", "milvus"), MILVUS)
    one_line_error(cli("serve", "lbhash", "--backend", "milvus", "--port", "0"), MILVUS)


def test_tensorboard_logger_without_tensorboardx(tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    hide(monkeypatch, "tensorboardX", "tensorboard")  # Lightning writes with either
    out = tmp_path / "run"
    one_line_error(cli("train", *FAST_TRAIN, "--epochs", "1", "--logger", "tensorboard", "--out", out),
                   TENSORBOARD)
    assert not out.exists()  # checked before the run writes anything


def test_any_one_of_alternative_modules_will_do(monkeypatch):
    hide(monkeypatch, "lbhash_no_such_module")
    require_extra("x", "y", ("lbhash_no_such_module", "json"))
    with pytest.raises(InputError, match=r"^x needs the 'y' extra: pip install 'lbhash\[y\]' \(no module "
                                         r"lbhash_no_such_module or lbhash_no_such_module_2\)$"):
        require_extra("x", "y", "json", ("lbhash_no_such_module", "lbhash_no_such_module_2"))
