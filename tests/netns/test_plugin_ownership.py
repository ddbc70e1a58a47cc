"""The plugin loader and its owners: a file or a sticky directory owned by another user is
refused, a plugin in root's sticky directory is accepted (needs root: the test makes files
another user's)."""

import pytest

from tests.unit.test_plugin_hostile import REFUSED_AS_ROOT
from tests.unit.test_plugin_hostile import test_a_good_plugin_is_accepted as _accepted
from tests.unit.test_plugin_hostile import test_the_loader_refuses_before_dlopen as _refuses
from tests.unit.test_plugin_hostile import test_validate_names_the_problem as _validate_names

pytestmark = pytest.mark.root


@pytest.mark.parametrize("which,reason", [pytest.param(*c, id=c[0]) for c in REFUSED_AS_ROOT])
def test_a_file_owned_by_another_user_is_refused_before_dlopen(lab, which, reason):
    _refuses(lab, which, reason)


@pytest.mark.parametrize("which,reason", [pytest.param(*c, id=c[0]) for c in REFUSED_AS_ROOT])
def test_validate_names_the_owner(lab, tmp_path, capsys, which, reason):
    _validate_names(lab, tmp_path, capsys, which, reason)


def test_a_plugin_in_roots_sticky_directory_is_accepted(lab):
    _accepted(lab, "in-sticky-dir")
