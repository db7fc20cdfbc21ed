"""The mutation operators: what is mutated, what is left alone, and that applying matches listing."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tools.mutation import apply_mutation, list_mutations


def described(source: str) -> list[str]:
    tree = ast.parse(textwrap.dedent(source))
    return [f"{m.line} {m.scope} {m.operator}: {m.description}" for m in list_mutations(tree)]


def test_operators_comparisons_and_boolean_ops():
    """Each operator, comparison and `and`/`or` gets exactly one replacement, shown in its expression."""
    assert described(
        """
        def f(a, b):
            if a < b and a is not None:
                a += 2
            return a
        """
    ) == [
        "3 f compare: a < b -> a <= b",
        "3 f compare: a is not None -> a is None",
        "3 f boolop: a < b and a is not None -> a < b or a is not None",
        "4 f constant: a += 2 -> a += 3",
        "4 f binop: a += 2 -> a -= 2",
        "4 f statement: a += 2 -> pass",
        "5 f return: return a -> return None",
    ]


@pytest.mark.parametrize(
    ("expr", "mutant"),
    [
        ("a + b", "a - b"),
        ("a - b", "a + b"),
        ("a * b", "a / b"),
        ("a / b", "a * b"),
        ("a // b", "a * b"),
        ("a % b", "a // b"),
        ("a ** b", "a * b"),
        ("a << b", "a >> b"),
        ("a >> b", "a << b"),
        ("a & b", "a | b"),
        ("a | b", "a & b"),
        ("a ^ b", "a & b"),
        ("a <= b", "a < b"),
        ("a > b", "a >= b"),
        ("a >= b", "a > b"),
        ("a == b", "a != b"),
        ("a != b", "a == b"),
        ("a in b", "a not in b"),
        ("a not in b", "a in b"),
        ("a is b", "a is not b"),
        ("a or b", "a and b"),
        ("not a", "a"),
        ("-a", "a"),
    ],
)
def test_each_operator_has_its_replacement(expr, mutant):
    """The one replacement of every operator the runner mutates."""
    assert described(f"x = {expr}\n") == [f"1 <module> {_kind(expr)}: {expr} -> {mutant}"]


def _kind(expr: str) -> str:
    if expr.startswith(("not", "-")):
        return "unary"
    if " or " in expr:
        return "boolop"
    op = expr.split()[1:-1]
    return "compare" if op[0] in ("<=", ">", ">=", "==", "!=", "in", "not", "is") else "binop"


def test_constants_numbers_and_booleans():
    """Numbers grow by one and booleans flip; strings, bytes and None stay."""
    assert described("A = 0\nB = 1.5\nC = True\nD = 'x'\nE = b'y'\nF = None\nG = ...\n") == [
        "1 <module> constant: A = 0 -> A = 1",
        "2 <module> constant: B = 1.5 -> B = 2.5",
        "3 <module> constant: C = True -> C = False",
    ]


def test_strings_docstrings_fstrings_annotations_and_decorators_are_left_alone():
    """Nothing inside a docstring, an f-string, an annotation, a decorator or a TYPE_CHECKING block is mutated."""
    assert described(
        """
        '''Module docstring 1 + 2.'''
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            LIMIT = 1 + 2

        @decorate(slots=True, size=3)
        class C:
            '''Class docstring.'''

            def f(self, n: Annotated[int, 5] = 7) -> Literal[1]:
                '''Docstring.'''
                "a stray string"
                return f"{n + 1} items" + "s"
        """
    ) == ["11 C constant: 7 -> 8", "14 C.f return: return f'{n + 1} items' + 's' -> return None"]


def test_statements_are_removed_only_inside_functions():
    """Module- and class-level statements stay (removing a definition only breaks the import)."""
    out = described(
        """
        import os
        x = os.sep
        class C:
            y = x
            def f(self):
                call()
                self.z = 1
                del self.z
                raise ValueError
        """
    )
    assert out == [
        "7 C.f statement: call() -> pass",
        "8 C.f constant: self.z = 1 -> self.z = 2",
        "8 C.f statement: self.z = 1 -> pass",
        "9 C.f statement: del self.z -> pass",
        "10 C.f statement: raise ValueError -> pass",
    ]


def test_return_none_and_bare_return_are_not_mutated():
    """`return None` and a bare `return` already return None."""
    assert described("def f():\n    return None\ndef g():\n    return\n") == []


def test_string_concatenation_and_formatting_are_not_mutated():
    """`'a' + x` and `'%s' % x` are message building, not arithmetic."""
    assert described("def f(x):\n    y = 'a' + x\n    z = '%s' % x\n") == [
        "2 f statement: y = 'a' + x -> pass",
        "3 f statement: z = '%s' % x -> pass",
    ]


def test_applying_a_mutation_changes_exactly_that_site():
    """Mutation i of the listing is what `apply_mutation(tree, i)` builds, and nothing else changes."""
    source = "def f(a, b):\n    return a + b * 2\n"
    listing = list_mutations(ast.parse(source))
    built = [ast.unparse(apply_mutation(ast.parse(source), m.index)) for m in listing]
    assert built == [
        "def f(a, b):\n    return a + b * 3",
        "def f(a, b):\n    return a + b / 2",
        "def f(a, b):\n    return a - b * 2",
        "def f(a, b):\n    return None",
    ]
    namespace: dict[str, object] = {}
    exec(compile(apply_mutation(ast.parse(source), 2), "<m>", "exec"), namespace)
    assert namespace["f"](10, 3) == 4  # type: ignore[operator]


def test_a_mutation_that_does_not_exist_is_refused():
    """An index past the listing raises IndexError naming how many there are."""
    with pytest.raises(IndexError, match=r"mutation 4 does not exist \(the module has 4\)"):
        apply_mutation(ast.parse("def f(a, b):\n    return a + b * 2\n"), 4)


def test_scopes_name_nested_functions_and_methods():
    """A mutation names the enclosing class and function path."""
    out = described("class K:\n    def m(self):\n        def inner():\n            return 1\n        return inner\n")
    assert out == [
        "4 K.m.inner constant: 1 -> 2",
        "4 K.m.inner return: return 1 -> return None",
        "5 K.m return: return inner -> return None",
    ]
