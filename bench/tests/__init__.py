"""The evaluation's tests (a package, so that its ``conftest`` is ``tests.conftest``, apart from the
library's ``tests/conftest.py`` when both trees are collected with ``--doctest-modules``)."""
