"""The ratchet's version, in a module of its own so the package and its cache can both read it."""

from __future__ import annotations

__version__ = "0.1.0"
