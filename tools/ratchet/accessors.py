"""The default accessor source: the named accessor that replaces a raw read of a field."""

from __future__ import annotations


def registry_accessor(name: str) -> str | None:
    """`get_schedule().page_size` for `page_size`, from the built-in schema; None if undeclared."""
    from sgconf.serving import field_info

    try:
        return field_info(name).accessor
    except KeyError:
        return None
