"""The examples in the front doors' docstrings run and print what they say."""

import doctest

import pytest

from lbhash import HashEncoder
from lbhash.index import CodeIndex
from lbhash.methods import LowerBoundObjective, create_method

FRONT_DOORS = [HashEncoder, CodeIndex, create_method, LowerBoundObjective]


@pytest.mark.parametrize("front_door", FRONT_DOORS, ids=lambda f: f.__name__)
def test_the_docstring_has_numpydoc_sections_and_its_examples_run(front_door, tmp_path, monkeypatch):
    monkeypatch.setenv("LBHASH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    text = front_door.__doc__
    for section in ("Parameters\n    ----------", "Returns\n    -------", "Examples\n    --------"):
        assert section in text, f"{front_door.__name__}: no {section.splitlines()[0]} section"
    tests = doctest.DocTestFinder(recurse=False).find(front_door, front_door.__name__)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted >= 4 and result.failed == 0, result
