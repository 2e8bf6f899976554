"""The public API: `__all__` lists exactly the public names, and every public class is final."""

import importlib
import inspect
import subprocess
import sys
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
    later: dict[str, str] = getattr(module, "_LATER", {})  # imported on first use
    assert set(module.__all__) == public_names(module) | set(later)
    assert list(module.__all__) == sorted(module.__all__)
    assert set(dir(module)) >= set(module.__all__)


def test_the_engine_is_imported_on_first_use_and_reports_its_public_path() -> None:
    code = (
        "import sys, converge\n"
        "print('converge._engine' in sys.modules, 'converge._kernel._run' in sys.modules)\n"
        "from converge import *\n"
        "print('converge._engine' in sys.modules, repr(Engine), repr(converge.RetryPolicy))\n"
        "print(converge.Engine is Engine, converge.get_logger.__module__)\n"
        "try:\n"
        "    converge.Engin\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "False False",
        "True <class 'converge.Engine'> <class 'converge.RetryPolicy'>",
        "True converge",
        "module 'converge' has no attribute 'Engin'",
    ]


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
    code = "import sys, converge; print('converge_suggestors' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


PUBLIC_MODULES = [
    "converge",
    "converge.stores",
    "converge.ui",
    "converge.dask",
    "converge_suggestors",
]


@pytest.mark.parametrize("package", PUBLIC_MODULES)
def test_public_classes_and_functions_report_a_public_path(package: str) -> None:
    """`repr(converge.Engine)` names `converge`, not the private module that holds it."""
    module = importlib.import_module(package)
    private = [
        f"{name}: {value.__module__}"
        for name in module.__all__
        if (inspect.isclass(value := getattr(module, name)) or inspect.isfunction(value))
        and any(part.startswith("_") for part in value.__module__.split(".")[1:])
    ]
    assert private == []


def test_repr_of_a_public_class_is_its_public_path() -> None:
    import converge

    assert repr(converge.Engine) == "<class 'converge.Engine'>"
    assert repr(converge.Fact) == "<class 'converge.Fact'>"


def test_pickles_of_public_models_come_back_under_their_public_path() -> None:
    import pickle

    from converge import ContextKey, Engine, GateDecision, ProposedFact, RunRecord

    proposal = ProposedFact(key=ContextKey.SEEDS, id="a", content="c", provenance="p")
    decision = GateDecision.approve("gate:1:seeds/a", by="ana")
    record = RunRecord.of(Engine().run_sync(inputs=[proposal]))
    for value in (proposal, decision, record):
        dumped = pickle.dumps(value)
        assert b"converge\n" in dumped or b"\x8c\x08converge" in dumped
        assert pickle.loads(dumped) == value


def test_deferred_annotations_naming_public_models_still_resolve() -> None:
    """A user's model whose annotations name converge's models by string is built later."""
    from pydantic import BaseModel

    from converge import ProposedFact, RunRecord

    namespace: dict[str, object] = {}
    exec(
        "from __future__ import annotations\n"
        "from pydantic import BaseModel\n"
        "from converge import ProposedFact, RunRecord\n"
        "class Audit(BaseModel):\n"
        "    proposal: ProposedFact\n"
        "    record: RunRecord | None = None\n",
        namespace,
    )
    audit = namespace["Audit"]
    assert isinstance(audit, type)
    assert issubclass(audit, BaseModel)
    assert audit.model_rebuild(force=True) is not False
    built = audit.model_validate(
        {"proposal": {"key": "seeds", "id": "a", "content": "c", "provenance": "p"}}
    )
    assert isinstance(getattr(built, "proposal"), ProposedFact)  # noqa: B009
    for model in (ProposedFact, RunRecord):
        assert model.model_rebuild(force=True) is not False
