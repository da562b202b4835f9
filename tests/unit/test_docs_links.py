"""Every relative link of the project's documents resolves, anchors included, and
the README stays short.

The README points into docs/ for everything past a first session; a page moved
or a heading renamed would otherwise leave links that GitHub renders and that
lead nowhere. Anchors follow GitHub's rules: a heading's text as rendered
(code spans and emphasis unwrapped, link text kept), lower-cased, every
character that is not a letter, digit, space, hyphen or underscore dropped,
spaces turned into hyphens, and a repeated slug suffixed ``-1``, ``-2``, ...
An explicit ``<a id="...">`` or ``<a name="...">`` is an anchor too.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def documents() -> list[Path]:
    """README.md, CHANGELOG.md, THREAT_MODEL.md and every page of docs/."""
    named = [ROOT / name for name in ("README.md", "CHANGELOG.md", "THREAT_MODEL.md")]
    return [path for path in named if path.is_file()] + sorted((ROOT / "docs").glob("*.md"))


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def github_slug(heading: str) -> str:
    rendered = _CODE_SPAN.sub(lambda match: match.group(2).strip(), heading)
    rendered = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", rendered)  # a link's text stays
    rendered = re.sub(r"<[^>]+>", "", rendered)  # inline HTML renders as nothing
    rendered = re.sub(r"(\*\*|__|\*|_)(?=\S)(.+?)(?<=\S)\1", r"\2", rendered)
    kept = "".join(
        character for character in rendered.lower() if character.isalnum() or character in " -_"
    )
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(text):
        found.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_targets(text: str) -> list[tuple[int, str]]:
    targets: list[tuple[int, str]] = []
    for number, line in prose_lines(text):
        line = _CODE_SPAN.sub("", line)
        targets.extend((number, target) for target in _INLINE_LINK.findall(line))
        definition = _REFERENCE_DEFINITION.match(line)
        if definition is not None:
            targets.append((number, definition.group(1)))
    return targets


def broken_links(document: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``document`` whose file or ``#anchor`` does not exist."""
    text = document.read_text(encoding="utf-8")
    name = document.relative_to(root).as_posix()
    broken: list[str] = []
    for line, target in link_targets(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto: ...: not ours to check offline
        path_part, _, anchor = target.partition("#")
        linked = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not linked.exists():
            broken.append(f"{name}:{line}: {target} (no such file)")
            continue
        if anchor and linked.suffix == ".md":
            if unquote(anchor) not in anchors(linked.read_text(encoding="utf-8")):
                broken.append(f"{name}:{line}: {target} (no such heading)")
    return broken


def test_the_documents_have_links_to_check() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in documents()}
    assert {"README.md", "THREAT_MODEL.md", "docs/architecture.md"} <= names
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert sum(1 for _, target in link_targets(readme) if target.startswith("docs/")) >= 8


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = [entry for document in documents() for entry in broken_links(document)]
    assert not broken, "\n".join(broken)


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < README_MAX_LINES, f"README.md has {lines} lines: move the detail into docs/"


def test_github_slugs() -> None:
    assert github_slug("Differences from the reference") == "differences-from-the-reference"
    assert github_slug("Sandboxed fs/*: a persistent helper per policy") == (
        "sandboxed-fs-a-persistent-helper-per-policy"
    )
    assert github_slug("HTTP from the executor: `client.http`") == (
        "http-from-the-executor-clienthttp"
    )
    assert github_slug("Waiting for a prompt: `expect`") == "waiting-for-a-prompt-expect"
    assert github_slug("5. Network, managed (`enforceManagedNetwork` with a proxy)") == (
        "5-network-managed-enforcemanagednetwork-with-a-proxy"
    )
    assert github_slug('"Approve for the session": the approval cache') == (
        "approve-for-the-session-the-approval-cache"
    )
    assert github_slug("Unmasked /proc") == "unmasked-proc"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n## A\n") == {"a", "a-1", "a-2"}


def test_a_missing_page_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n## Real heading\n\n"
        "[ok](#real-heading) [ok](../README.md) [gone](missing.md) [bad](#no-such)\n"
        "`[in code](missing-too.md)`\n\n```\n[in a block](missing-three.md)\n```\n"
        "[web](https://example.com/x.md)\n"
    )
    (tmp_path / "README.md").write_text("# Readme\n")
    assert broken_links(page, root=tmp_path) == [
        "docs/page.md:5: missing.md (no such file)",
        "docs/page.md:5: #no-such (no such heading)",
    ]
