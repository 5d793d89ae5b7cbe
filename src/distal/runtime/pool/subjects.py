"""The pool's NATS names: subjects, streams, buckets, and what each identity may touch.

Everything a volunteer may publish or subscribe to carries its own name, so the server's
per-user permissions (:func:`volunteer_permissions`) let it pull its own units, read blocks
and publish results under its own subject, and nothing else: it cannot read another
volunteer's units or results, pose as another volunteer, touch the KV bucket of leases and
trust, or call any other part of the JetStream API. ``docs/pool.md`` lists the same table.
"""

from __future__ import annotations

import re

from distal.errors import InputError

ACCOUNT = "POOL"
UNITS_STREAM = "DISTAL_UNITS"
RESULTS_STREAM = "DISTAL_RESULTS"
BLOCKS_BUCKET = "distal_blocks"
BLOCKS_STREAM = f"OBJ_{BLOCKS_BUCKET}"
STATE_BUCKET = "distal_pool"  # KV: leases, trust, exclusions (coordinator only)

COORDINATOR = "coordinator"

#: a volunteer's name: one NATS subject token, one consumer name, one file name
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
RESERVED = frozenset({COORDINATOR, "system", "sys", "all", "any"})


def check_name(name: str) -> str:
    """``name`` if it can name a volunteer, else an :class:`InputError` saying why."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InputError(
            f"volunteer name {name!r}: 1-32 letters, digits, '_' or '-', starting with a "
            "letter or digit"
        )
    if name.lower() in RESERVED:
        raise InputError(f"volunteer name {name!r} is reserved")
    return name


def unit_subject(name: str) -> str:
    """Where the coordinator queues volunteer ``name``'s units (a work-queue stream)."""
    return f"distal.unit.{name}"


def result_subject(name: str, run: str, attempt: str) -> str:
    """Where volunteer ``name`` publishes the result of ``attempt`` of run ``run``."""
    return f"distal.result.{name}.{run}.{attempt}"


def hello_subject(name: str) -> str:
    return f"distal.hello.{name}"


def bye_subject(name: str) -> str:
    return f"distal.bye.{name}"


def control_subject(name: str) -> str:
    return f"distal.ctl.{name}"


def inbox_prefix(name: str) -> str:
    """The inbox prefix of volunteer ``name``'s connection (replies it may receive)."""
    return f"_INBOX_{name}"


def volunteer_permissions(name: str) -> dict[str, dict[str, list[str]]]:
    """The NATS permissions of volunteer ``name``: allow lists, everything else denied."""
    return {
        "publish": {
            "allow": [
                f"$JS.API.CONSUMER.MSG.NEXT.{UNITS_STREAM}.{name}",
                f"$JS.ACK.{UNITS_STREAM}.{name}.>",
                f"$JS.API.DIRECT.GET.{BLOCKS_STREAM}",
                f"$JS.API.DIRECT.GET.{BLOCKS_STREAM}.>",
                f"distal.result.{name}.>",
                hello_subject(name),
                bye_subject(name),
            ]
        },
        "subscribe": {"allow": [f"{inbox_prefix(name)}.>", control_subject(name)]},
    }


__all__ = [
    "ACCOUNT",
    "BLOCKS_BUCKET",
    "BLOCKS_STREAM",
    "COORDINATOR",
    "RESULTS_STREAM",
    "STATE_BUCKET",
    "UNITS_STREAM",
    "bye_subject",
    "check_name",
    "control_subject",
    "hello_subject",
    "inbox_prefix",
    "result_subject",
    "unit_subject",
    "volunteer_permissions",
]
