"""What ``--json`` prints: one JSON document on stdout, the same way for every command.

The shapes of the documents are described in the README ("Machine-readable output").
"""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(document: Any) -> str:
    """``document`` as strict JSON, indented. JSON has no inf or nan (Python's json module
    would write ``Infinity``, which other parsers refuse), so a value that is not a
    finite number, such as a change in percent from 0, is written as null."""
    return json.dumps(finite(document), indent=2, allow_nan=False)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float inside it replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value
