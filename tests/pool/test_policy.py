"""Where a pool's units go and when one is late (pure functions, no pool)."""

from __future__ import annotations

from distal.runtime.pool import policy


def test_morton_keeps_neighbours_together() -> None:
    grid = [(i, j) for i in range(4) for j in range(4)]
    order = sorted(grid, key=policy.morton)
    # each run of 4 in Z-order is a 2 x 2 square of the grid
    for k in range(0, 16, 4):
        rows = {i for i, _ in order[k : k + 4]}
        cols = {j for _, j in order[k : k + 4]}
        assert len(rows) == 2
        assert len(cols) == 2


def test_partition_is_contiguous_and_follows_speed() -> None:
    order = [f"u{k}" for k in range(12)]
    home = policy.partition(order, {"a": 1.0, "b": 1.0, "c": 2.0})
    runs = [home[u] for u in order]
    assert runs == ["a"] * 3 + ["b"] * 3 + ["c"] * 6
    assert policy.partition(order, {}) == {}
    assert set(policy.partition(order[:1], {"a": 1.0, "b": 1.0}).values()) <= {"a", "b"}


def test_a_volunteer_takes_its_own_run_first_then_what_it_holds() -> None:
    pending = ["u0", "u1", "u2", "u3"]
    home = {"u0": "a", "u1": "a", "u2": "b", "u3": "b"}
    inputs = {"u0": {"x": 10}, "u1": {"y": 10}, "u2": {"x": 10, "z": 5}, "u3": {"w": 10}}
    assert policy.pick("a", pending, home, inputs, set()) == "u0"
    # a's run is done: it steals the unit whose blocks it holds the most of
    assert policy.pick("a", ["u2", "u3"], home, inputs, {"x"}) == "u2"
    # holding none: from the end of the largest run
    assert policy.pick("c", pending, home, inputs, set()) == "u3"
    assert policy.pick("a", [], home, inputs, set()) is None


def test_a_deadline_grows_with_work_and_bytes_not_held() -> None:
    cold = policy.deadline(10**6, 0, "a", {}, {})
    assert cold >= 5.0
    warm = policy.deadline(10**9, 0, "a", {"a": 10**9}, {})
    assert warm == policy.LATE * 1.0
    more = policy.deadline(10**9, 10**8, "a", {"a": 10**9}, {"a": 10**7})
    assert more == warm + policy.LATE * 10.0
    # a volunteer with no measured link gets the slowest measured one's
    assert policy.deadline(10**9, 10**8, "b", {"a": 10**9}, {"a": 10**7, "c": 10**6}) > more


def test_a_unit_goes_back_to_the_volunteer_holding_its_blocks() -> None:
    order = ["u0", "u1", "u2", "u3"]
    inputs = {"u0": {"x": 8}, "u1": {"y": 8}, "u2": {"z": 8}, "u3": {"w": 8}}
    held = {"a": {"z", "w"}, "b": {"x", "y"}}
    home = policy.partition(order, {"a": 1.0, "b": 1.0}, held, inputs)
    assert home == {"u0": "b", "u1": "b", "u2": "a", "u3": "a"}
    # within its share (and the slack): a volunteer holding everything does not get it all
    home = policy.partition(order, {"a": 1.0, "b": 1.0}, {"a": {"x", "y", "z", "w"}}, inputs)
    assert sum(v == "a" for v in home.values()) == 3


def test_speed_classes_round_noise_and_keep_real_differences() -> None:
    assert policy.speed_classes({"a": 1.0, "b": None}) == {"a": 1.0, "b": 1.0}
    got = policy.speed_classes({"a": 100.0, "b": 83.0, "c": 48.0, "d": 26.0})
    assert got == {"a": 1.0, "b": 1.0, "c": 0.5, "d": 0.25}


def test_interleave_takes_the_runs_in_turn() -> None:
    home = {"u0": "a", "u1": "a", "u2": "b", "u3": "b", "u4": "b"}
    got = policy.interleave(["u0", "u1", "u2", "u3", "u4", "u5"], home)
    assert got == ["u0", "u2", "u1", "u3", "u4", "u5"]
