"""Fixtures the tests here share with the unit tests of the same area, where they are
defined (a plugin built for the test, a lab of plugin files, a PKI)."""

from tests.unit.test_dialout import pki  # noqa: F401
from tests.unit.test_plugin_faults import faulty, plugin_dir  # noqa: F401
from tests.unit.test_plugin_hostile import lab  # noqa: F401
