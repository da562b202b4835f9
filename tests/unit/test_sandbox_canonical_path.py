"""``canonical_path`` (sandbox/policy.py): for every path that exists it gives
what ``os.path.realpath`` gives, on random trees of directories, files and
symlinks (relative and absolute targets, ``..``, dangling links, loops); for a
path that does not exist, None; past the kernel's 40 links (a loop among them),
a refusal, where ``realpath`` walked on without limit (and, for a loop, answered
a path the kernel cannot open)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from execserver.sandbox.policy import canonical_path
from execserver.wire.errors import INVALID_PARAMS, RpcError

NAMES = ["a", "b", "c", "d"]

# A tree: each name under the root or under "a"/"b" is a dir, a file or a symlink.
_kind = st.sampled_from(["dir", "file", "link"])
_component = st.sampled_from([*NAMES, "..", "."])
_link_target = st.tuples(st.booleans(), st.lists(_component, min_size=1, max_size=4))
_node = st.tuples(_kind, _link_target)
_tree = st.dictionaries(
    st.tuples(st.sampled_from(["", "a", "b"]), st.sampled_from(NAMES)), _node, max_size=12
)
_query = st.lists(_component, min_size=1, max_size=6)


def _build(root: Path, tree: dict[tuple[str, str], tuple[str, tuple[bool, list[str]]]]) -> None:
    for (parent, name), (kind, (absolute, target)) in sorted(tree.items()):
        folder = root / parent
        if not folder.is_dir() or os.path.lexists(folder / name):
            continue
        if kind == "dir":
            (folder / name).mkdir()
        elif kind == "file":
            (folder / name).write_text(name)
        else:
            text = "/".join(target)
            os.symlink(f"{root}/{text}" if absolute else text, folder / name)


@settings(max_examples=300, deadline=None)
@given(tree=_tree, query=_query)
def test_it_agrees_with_realpath_on_what_exists(
    tree: dict[tuple[str, str], tuple[str, tuple[bool, list[str]]]], query: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(os.path.realpath(scratch))
        _build(root, tree)
        path = f"{root}/{'/'.join(query)}"
        expected = os.path.realpath(path)
        try:
            resolved = canonical_path(path)
        except RpcError as refusal:  # a loop: the kernel cannot resolve it either
            assert refusal.code == INVALID_PARAMS
            with pytest.raises(OSError):
                os.stat(path)
            return
        if os.path.exists(expected):
            assert resolved == expected
        else:
            assert resolved is None


def test_forty_links_resolve_and_forty_one_are_refused(tmp_path: Path) -> None:
    (tmp_path / "end").mkdir()
    for count in (40, 41):
        chain = tmp_path / f"chain{count}"
        chain.mkdir()
        for i in range(count):
            target = tmp_path / "end" if i == count - 1 else chain / f"l{i + 1}"
            os.symlink(target, chain / f"l{i}")
    assert canonical_path(str(tmp_path / "chain40" / "l0")) == str(tmp_path / "end")
    with pytest.raises(RpcError) as refused:
        canonical_path(str(tmp_path / "chain41" / "l0"))
    assert refused.value.code == INVALID_PARAMS
    assert "too many levels of symbolic links" in refused.value.message, refused.value.message


def test_a_path_that_does_not_exist_is_none(tmp_path: Path) -> None:
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    assert canonical_path(str(tmp_path / "nope")) is None
    assert canonical_path(str(tmp_path / "dangling")) is None
    assert canonical_path(str(tmp_path / "dangling" / "x")) is None


def test_a_relative_path_is_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    assert canonical_path("link/../link") == os.path.realpath("link/../link")
    assert canonical_path("link") == str(tmp_path.resolve() / "real")
