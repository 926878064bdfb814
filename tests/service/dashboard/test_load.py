"""What the dashboard keeps in memory: only values that cannot change, the most recent ones, loaded once."""

from __future__ import annotations

from remat.service.dashboard._load import _Memo


def test_the_memo_loads_only_what_it_lacks_and_forgets_the_oldest():
    asked: list[list[str]] = []

    def load(keys: list[str]) -> dict[str, str]:
        asked.append(keys)
        return {k: k.upper() for k in keys if k != "skip"}

    memo: _Memo[str, str] = _Memo(3)
    assert memo.get_many(["a", "b", "skip"], load) == {"a": "A", "b": "B"}
    assert memo.get_many(["a", "c"], load) == {"a": "A", "c": "C"}
    assert asked == [["a", "b", "skip"], ["c"]]
    memo.get_many(["d"], load)  # holds a, c, d now: b was used least recently
    memo.get_many(["b", "a"], load)
    assert asked[-1] == ["b"]
    assert memo.get("a", lambda: "never") == "A"
