"""The record's other names: subclasses, aliases and renaming imports, followed across files."""

from __future__ import annotations

from tools.ratchet.recordtypes import record_types


def test_subclasses_aliases_and_imports_are_followed_transitively():
    """A name derived from a derived name counts, in whichever file and order they are declared."""
    texts = [
        "class LaunchArgs(PortArgs, Mixin):\n    pass\n",
        "from sgconf import ServerArgs as SA\nclass PortArgs(SA):\n    pass\n",
        "Args = sgconf.ServerArgs  # the record\ntype Generic[T] = LaunchArgs\nOld: TypeAlias = Args\n",
        "from a import (\n    LaunchArgs as LA,\n    other,\n)\n",
    ]
    assert record_types(texts, {"ServerArgs"}) == {
        "ServerArgs",
        "SA",
        "PortArgs",
        "LaunchArgs",
        "Args",
        "Generic",
        "Old",
        "LA",
    }


def test_unrelated_names_are_not_taken():
    """Reading a field, calling the class or subclassing something else adds no name."""
    texts = [
        "x = ServerArgs(page_size=1)\nclass Other(Base):\n    pass\nsize = args.ServerArgs_page\n",
        "with ServerArgs as sa:\n    pass\n",
    ]
    assert record_types(texts, {"ServerArgs"}) == {"ServerArgs"}
