"""The public API: `__all__` lists exactly the public names, and every public class is final."""

import importlib
import inspect
from types import ModuleType
from typing import is_typeddict

import pytest

PACKAGES = ["converge", "converge_suggestors"]


def public_names(module: ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_all_lists_exactly_the_public_names(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == public_names(module)
    assert list(module.__all__) == sorted(module.__all__)


@pytest.mark.parametrize("package", PACKAGES)
def test_public_concrete_classes_are_final(package: str) -> None:
    module = importlib.import_module(package)
    open_classes = [
        name
        for name in module.__all__
        if inspect.isclass(value := getattr(module, name))
        and not getattr(value, "__final__", False)
        and not getattr(value, "_is_protocol", False)
        and not is_typeddict(value)
        and not issubclass(value, Exception)
    ]
    assert open_classes == []


def test_converge_does_not_import_converge_suggestors() -> None:
    import subprocess
    import sys

    code = "import sys, converge; print('converge_suggestors' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
