"""`Formation`: two suggestors with one name are refused when it is built, naming both."""

from __future__ import annotations

import pytest

from converge import AgentEffect, ConfigurationError, Context, ContextKey, Engine, Formation


class Greeter:
    dependencies = (ContextKey.SEEDS,)

    def __init__(self, name: str) -> None:
        self.name = name

    def accepts(self, ctx: Context, /) -> bool:
        return False

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


class Echo(Greeter):
    pass


def test_formation_refuses_two_suggestors_with_one_name_when_it_is_built() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Formation(name="hello", suggestors=(Greeter("greeter"), Echo("echo"), Echo("greeter")))
    assert str(caught.value) == (
        "formation 'hello': suggestors[0] (Greeter) and suggestors[2] (Echo) are both named "
        "'greeter'; give each a name of its own"
    )


def test_formation_accepts_suggestors_with_names_of_their_own() -> None:
    formation = Formation(name="hello", suggestors=(Greeter("a"), Echo("b")))
    assert formation.engine().suggestor_names == ("a", "b")


def test_register_suggestor_names_both_suggestors_of_one_name() -> None:
    engine = Engine()
    engine.register_suggestor(Greeter("greeter"))
    engine.register_suggestor(Echo("echo"))
    with pytest.raises(ConfigurationError) as caught:
        engine.register_suggestor(Echo("greeter"))
    assert str(caught.value) == (
        "a suggestor named 'greeter' is already registered: suggestor 2 (Echo) and suggestor 0 "
        "(Greeter) have the same name; give each a name of its own"
    )
