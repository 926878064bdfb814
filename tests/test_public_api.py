"""The packages' public surface: sorted __all__ that matches what is exported, and doctests that run."""

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["remat.schedules", "remat.solvers", "remat.report", "remat.service"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_exported(name):
    pkg = importlib.import_module(name)
    assert list(pkg.__all__) == sorted(pkg.__all__, key=_isort_key)
    for attr in pkg.__all__:
        assert hasattr(pkg, attr), f"{name}.{attr} is listed in __all__ but missing"


def _isort_key(name):
    """Constants, then classes, then functions, each alphabetical (isort's order for __all__)."""
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


def _modules():
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=name + "."):
            yield info.name


@pytest.mark.parametrize("module", sorted(_modules()))
def test_doctests(module):
    mod = importlib.import_module(module)
    failures, _ = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert failures == 0
