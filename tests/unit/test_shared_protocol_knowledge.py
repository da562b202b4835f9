"""What the executor and the orchestrator must agree on is written once, in wire/:
the words that mark a sandbox denial and the kinds of special paths."""

from __future__ import annotations

import pytest

from execserver.core.apply_patch.runtime import is_likely_patch_denial
from execserver.core.permissions import SpecialPath
from execserver.sandbox import is_sandbox_denied
from execserver.wire import sandbox as wire_sandbox
from execserver.wire.sandbox_denial import DENIAL_KEYWORDS


@pytest.mark.parametrize("keyword", DENIAL_KEYWORDS)
def test_executor_and_apply_patch_read_a_denial_from_the_same_words(keyword: str) -> None:
    output = f"cp: cannot create '/w/x': {keyword.upper()}\n"
    assert is_sandbox_denied(1, output.encode())
    assert is_likely_patch_denial(output)


def test_text_without_a_denial_word_is_a_denial_for_neither() -> None:
    output = "Failed to find expected lines in /w/x"
    assert not is_sandbox_denied(1, output.encode())
    assert not is_likely_patch_denial(output)


def test_special_path_kinds_are_the_wire_tags_in_declaration_order() -> None:
    # serde names the variants in this order in its unknown-variant error.
    assert wire_sandbox.SPECIAL_PATH_KINDS == (
        "root",
        "minimal",
        "current_working_directory",
        "project_roots",
        "tmpdir",
        "slash_tmp",
        "unknown",
    )


@pytest.mark.parametrize("kind", wire_sandbox.SPECIAL_PATH_KINDS)
def test_core_accepts_every_special_path_kind_the_wire_knows(kind: str) -> None:
    assert SpecialPath(kind).kind == kind


def test_core_refuses_a_kind_the_wire_does_not_know() -> None:
    with pytest.raises(ValueError, match="unknown special path kind 'home'"):
        SpecialPath("home")


def test_the_wire_decoder_names_the_same_kinds_when_it_refuses_one() -> None:
    with pytest.raises(Exception) as caught:
        wire_sandbox.decode_sandbox_context(
            {
                "permissions": {
                    "type": "managed",
                    "file_system": {
                        "type": "restricted",
                        "entries": [
                            {
                                "path": {"type": "special", "value": {"kind": "home"}},
                                "access": "read",
                            }
                        ],
                    },
                    "network": "restricted",
                }
            }
        )
    message = str(caught.value)
    assert "unknown variant `home`" in message
    assert ", ".join(f"`{k}`" for k in wire_sandbox.SPECIAL_PATH_KINDS) in message
