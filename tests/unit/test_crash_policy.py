"""Policy rules about crash states (`sqlwa crash`): ``max_lost_commits`` and
``forbid_corruption`` parse into limits on the store's crash columns, and a policy that
says them wrongly is one clear error."""

from __future__ import annotations

import pytest

from sqlwa.errors import UsageError
from sqlwa.results import check


def test_forbid_corruption_is_no_corrupt_state_allowed() -> None:
    rule = check.parse_rule({"forbid_corruption": True, "max_lost_commits": 0}, 1)
    assert rule.limits == {"max_lost_commits": 0.0, "max_corrupt_states": 0.0}


def test_forbid_corruption_false_adds_nothing() -> None:
    with pytest.raises(UsageError, match="sets no limit"):
        check.parse_rule({"forbid_corruption": False}, 1)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"forbid_corruption": "yes"}, "must be true or false"),
        ({"forbid_corruption": True, "max_corrupt_states": 0}, "say the same thing"),
    ],
)
def test_a_wrong_corruption_rule_is_one_line(raw: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        check.parse_rule(raw, 1)
