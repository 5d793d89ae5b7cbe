"""numpy keywords that DArrays and ``distal.numpy`` do not implement are refused by name.

numpy's functions take keywords beyond their positional arguments (``where=``, ``initial=``,
``casting=``, ...). A keyword left at numpy's default changes nothing; any other one would
change the answer, so silently ignoring it would give a wrong result: it is a
``NotSupportedYet`` naming the function and the keywords (one rule for every function here).
"""

from __future__ import annotations

from typing import Any

from distal.errors import NotSupportedYet


def refuse_keywords(name: str, kw: dict[str, Any], **defaults: Any) -> None:
    """Refuse what is left in ``kw`` once the keywords given at their default (``defaults``,
    compared by identity: ``None``, ``True``) are dropped."""
    given = {k: v for k, v in kw.items() if not (k in defaults and v is defaults[k])}
    if given:
        raise NotSupportedYet(
            f"{name} with {sorted(given)}: not implemented (numpy's defaults only)"
        )
