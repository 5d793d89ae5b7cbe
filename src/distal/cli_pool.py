"""The volunteer pool's command line: ``distal pool serve|invite|revoke`` and
``distal volunteer``.

- ``distal pool serve [--dir D] [--host H] [--port P] [--address A]`` makes the pool in
  ``D`` on first use (its CA, the coordinator's credentials ``D/coordinator.creds``) and
  runs its NATS server until SIGTERM or SIGINT. A session reaches it with
  ``dl.Session("pool", pool="D/coordinator.creds")``.
- ``distal pool invite NAME -o FILE [--dir D] [--address A]`` writes a volunteer's
  credentials (mode 0600) and lets the running server know.
- ``distal pool revoke NAME [--dir D]`` removes a volunteer's key; the running server
  closes its connections and refuses it from then on.
- ``distal volunteer FILE [--cpus N] [--memory GB] [--nice K] [--server URL]`` donates
  this machine: it connects out to the coordinator and computes units within those limits
  until stopped (SIGTERM or SIGINT: it gives back its units and exits 0).
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

DEFAULT_DIR = "~/.local/share/distal/pool"


def _dir(args: argparse.Namespace) -> Path:
    return Path(os.path.expanduser(args.dir))


def cmd_serve(args: argparse.Namespace) -> int:
    from distal.runtime.pool.server import NatsServer, PoolDir

    pool = PoolDir.create(_dir(args), host=args.host, port=args.port, address=args.address)
    server = NatsServer(pool).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"distal pool: serving {pool.address()} from {pool.path} "
          f"(coordinator credentials: {pool.path / 'coordinator.creds'})", flush=True)  # fmt: skip
    try:
        while not stop.wait(1.0):
            if server.proc is None or server.proc.poll() is not None:
                print("distal pool: the NATS server stopped; see server.log", flush=True)
                return 1
    finally:
        server.stop()
    return 0


def cmd_invite(args: argparse.Namespace) -> int:
    from distal.runtime.pool.server import PoolDir

    pool = PoolDir(_dir(args))
    pool.meta()
    creds = pool.invite(args.name, address=args.address)
    creds.write(args.output)
    print(f"distal pool: invited {args.name}; credentials in {args.output} (keep them secret)")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    from distal.runtime.pool.server import PoolDir

    pool = PoolDir(_dir(args))
    pool.meta()
    pool.revoke(args.name)
    running = "the server closed its connections" if pool.pid() else "no server is running"
    print(f"distal pool: revoked {args.name} ({running})")
    return 0


def cmd_volunteer(args: argparse.Namespace) -> int:
    from distal.runtime.pool import volunteer

    servers = tuple(args.server) if args.server else None
    return volunteer.main(args.credentials, args.cpus, args.memory, args.nice, servers)


def add_subcommands(sub: Any) -> None:
    """Add ``pool`` and ``volunteer`` to the ``distal`` command's subparsers."""
    pool = sub.add_parser("pool", help="run a volunteer pool: serve, invite, revoke")
    verbs = pool.add_subparsers(dest="verb", metavar="VERB", required=True)
    serve = verbs.add_parser("serve", help="run the pool's NATS server (made on first use)")
    serve.add_argument("--dir", default=DEFAULT_DIR, help=f"the pool's directory ({DEFAULT_DIR})")
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on (0.0.0.0)")
    serve.add_argument("--port", type=int, default=4222, help="port to listen on (4222)")
    serve.add_argument(
        "--address",
        default=None,
        help="what invites tell volunteers to connect to (tls://HOST:PORT)",
    )
    serve.set_defaults(func=cmd_serve)
    inv = verbs.add_parser("invite", help="write a new volunteer's credentials file")
    inv.add_argument("name", help="the volunteer's name (letters, digits, _ and -)")
    inv.add_argument("-o", "--output", required=True, help="credentials file to write")
    inv.add_argument("--dir", default=DEFAULT_DIR, help=f"the pool's directory ({DEFAULT_DIR})")
    inv.add_argument("--address", default=None, help="the address the volunteer connects to")
    inv.set_defaults(func=cmd_invite)
    rev = verbs.add_parser("revoke", help="remove a volunteer: its key no longer connects")
    rev.add_argument("name")
    rev.add_argument("--dir", default=DEFAULT_DIR, help=f"the pool's directory ({DEFAULT_DIR})")
    rev.set_defaults(func=cmd_revoke)

    vol = sub.add_parser("volunteer", help="donate this machine to a pool (outbound only)")
    vol.add_argument("credentials", help="the credentials file from `distal pool invite`")
    vol.add_argument("--cpus", type=int, default=1, help="cores the units may use (1)")
    vol.add_argument(
        "--memory",
        type=float,
        default=None,
        help="GB of memory the compute process may use (no limit)",
    )
    vol.add_argument("--nice", type=int, default=10, help="scheduling priority 0-19 (10)")
    vol.add_argument(
        "--server",
        action="append",
        default=[],
        help="connect here instead of the credentials' address (repeatable)",
    )
    vol.set_defaults(func=cmd_volunteer)


__all__ = ["add_subcommands"]
