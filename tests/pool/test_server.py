"""A pool's server: identities, TLS, what a volunteer's key lets it do, and revoking it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from pool_kit import LocalPool

from distal.errors import InputError
from distal.runtime.pool import subjects
from distal.runtime.pool.credentials import Credentials

pytestmark = pytest.mark.timeout(120)


def test_invite_writes_private_credentials_and_the_server_knows_only_the_public_key(
    local_pool: LocalPool,
) -> None:
    path = local_pool.invite("alice")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    creds = Credentials.read(path)
    assert creds.user == "alice"
    assert creds.role == "volunteer"
    conf = (local_pool.dir.path / "nats.conf").read_text()
    assert creds.seed not in conf
    assert local_pool.dir.volunteers()["alice"]["public"] in conf
    assert stat.S_IMODE(os.stat(local_pool.dir.path / "ca.key").st_mode) == 0o600
    with pytest.raises(InputError, match="already"):
        local_pool.dir.invite("alice")
    for bad in ("coordinator", "a.b", "x>", "", "-x", "a" * 40):
        with pytest.raises(InputError):
            local_pool.dir.invite(bad)


def test_a_malformed_credentials_file_is_a_clear_error(tmp_path: Path) -> None:
    for text in ("not json", "[]", '{"distal_pool_credentials": 9}',
                 json.dumps({"distal_pool_credentials": 1, "pool": "p", "user": "u",
                             "role": "volunteer", "seed": "SUnotaseed", "servers": [],
                             "ca": ""})):  # fmt: skip
        (tmp_path / "c").write_text(text)
        with pytest.raises(InputError):
            Credentials.read(tmp_path / "c")


async def _connect(creds: Credentials, address: str, **over: Any) -> Any:
    import nats

    errors: list[str] = []

    async def err(e: Exception) -> None:
        errors.append(str(e))

    opts = creds.connect_options((address,))
    opts.update(allow_reconnect=False, error_cb=err, **over)
    nc = await nats.connect(**opts)
    nc.errors = errors  # type: ignore[attr-defined]
    return nc


def test_a_volunteer_may_pull_its_own_units_read_blocks_and_publish_its_results_only(
    local_pool: LocalPool, link: Any
) -> None:
    alice = Credentials.read(local_pool.invite("alice"))
    local_pool.invite("bob")

    async def probe() -> dict[str, Any]:
        await link.consumer("alice", 10)
        await link.consumer("bob", 10)
        await link.send("alice", b"unit for alice")
        await link.send("bob", b"unit for bob")
        await link.put_object("b" * 64, memoryview(b"block bytes"))
        nc = await _connect(alice, local_pool.address)
        js = nc.jetstream()
        out: dict[str, Any] = {}
        sub = await js.pull_subscribe_bind(durable="alice", stream=subjects.UNITS_STREAM)
        msgs = await sub.fetch(1, timeout=5)
        out["own unit"] = msgs[0].data
        await msgs[0].ack()
        from distal.runtime.pool.blocks import read_object

        out["block"] = b"".join([c async for c in read_object(nc, "b" * 64, 11)])
        out["own result"] = (await js.publish("distal.result.alice.r.a1", b"x")).stream

        async def denied(coro: Any) -> bool:
            before = len(nc.errors)
            try:
                await asyncio.wait_for(coro, 2)
            except Exception:
                return True
            # the server's refusal of a publish or a subscribe comes back on its own: wait
            # for it (a loaded machine may take a while), no longer than it needs
            with contextlib.suppress(Exception):
                await nc.flush(5)
            for _ in range(100):
                if len(nc.errors) > before:
                    break
                await asyncio.sleep(0.05)
            return len(nc.errors) > before and "permissions violation" in nc.errors[-1]

        out["bob's result"] = await denied(js.publish("distal.result.bob.r.a1", b"x", timeout=1))
        out["bob's units"] = await denied(
            nc.request(f"$JS.API.CONSUMER.MSG.NEXT.{subjects.UNITS_STREAM}.bob", b"1", timeout=1)
        )
        out["subscribe to units"] = await denied(nc.subscribe("distal.unit.bob"))
        out["stream info"] = await denied(
            nc.request(f"$JS.API.STREAM.INFO.{subjects.UNITS_STREAM}", b"", timeout=1)
        )
        out["write a block"] = await denied(
            js.publish(f"$O.{subjects.BLOCKS_BUCKET}.C.forged", b"x", timeout=1)
        )
        out["read the KV"] = await denied(
            nc.request(f"$JS.API.DIRECT.GET.KV_{subjects.STATE_BUCKET}.$KV.x", b"", timeout=1)
        )
        out["pose as bob"] = await denied(nc.publish("distal.hello.bob", b"x"))
        await nc.close()
        return out

    got = link.call(probe(), 60)
    assert got["own unit"] == b"unit for alice"
    assert got["block"] == b"block bytes"
    assert got["own result"] == subjects.RESULTS_STREAM
    for what in ("bob's result", "bob's units", "subscribe to units", "stream info",
                 "write a block", "read the KV", "pose as bob"):  # fmt: skip
        assert got[what] is True, what


def test_only_the_pools_ca_and_a_known_key_connect(local_pool: LocalPool, tmp_path: Path) -> None:
    from distal.runtime.pool import tls
    from distal.runtime.pool.credentials import new_seed

    alice = Credentials.read(local_pool.invite("alice"))
    (tmp_path / "other").mkdir()
    tls.make_ca(tmp_path / "other", "other")
    other_ca = Credentials(alice.pool, "alice", "volunteer", alice.seed, alice.servers,
                           (tmp_path / "other" / "ca.pem").read_text())  # fmt: skip
    stranger = Credentials(alice.pool, "mallory", "volunteer", new_seed(), alice.servers, alice.ca)

    async def attempt(creds: Credentials, **over: Any) -> str:
        try:
            nc = await _connect(creds, local_pool.address, connect_timeout=3, **over)
        except Exception as e:
            return type(e).__name__ + str(e)
        await nc.close()
        return "connected"

    assert asyncio.run(attempt(alice)) == "connected"
    assert "connected" != asyncio.run(attempt(other_ca))  # the server is not the pool's
    assert "Authorization" in asyncio.run(attempt(stranger))
    plain = local_pool.address.replace("tls://", "nats://")
    assert "connected" != asyncio.run(attempt(alice, tls=None, servers=[plain]))


def test_a_revoked_volunteer_is_cut_off_and_stops(local_pool: LocalPool) -> None:
    p = local_pool.volunteer("alice")
    from pool_kit import wait_for

    wait_for(lambda: "connected" in local_pool.log("alice"), 60, "the volunteer to connect")
    local_pool.dir.revoke("alice")
    assert local_pool.dir.volunteers()["alice"]["revoked"] is True
    assert (
        local_pool.dir.volunteers()["alice"]["public"]
        not in (local_pool.dir.path / "nats.conf").read_text()
    )
    assert p.wait(60) == 3
    assert "refuses this volunteer's key" in local_pool.log("alice")
