"""metadata.threadId validation worded like the Rust uuid crate."""

from __future__ import annotations

import pytest

from execserver.wire.errors import RpcError
from execserver.wire.rust.uuid import check_uuid


@pytest.mark.parametrize(
    "text",
    [
        "123e4567-e89b-12d3-a456-426614174000",
        "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
        "123E4567E89B12D3A456426614174000",
    ],
)
def test_valid(text: str) -> None:
    check_uuid(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "nope",
            "invalid character: expected an optional prefix of `urn:uuid:` followed by "
            "[0-9a-fA-F-], found `n` at 1",
        ),
        ("abc", "invalid length: expected length 32 for simple format, found 3"),
        ("12-34", "invalid group count: expected 5, found 2"),
        (
            "123e4567-e89b-12d3-a456-42661417400",
            "invalid group length in group 4: expected 12, found 11",
        ),
    ],
)
def test_invalid(text: str, message: str) -> None:
    with pytest.raises(RpcError) as err:
        check_uuid(text)
    assert (err.value.code, err.value.message) == (-32602, message)
