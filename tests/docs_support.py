"""Reading the documentation as ``tests/test_docs.py`` and ``tests/test_tutorial.py`` check it:
the fenced code blocks of README.md and docs/*.md, their links, GitHub's heading anchors.

A block's info string is its language and, optionally, ``{no-run: why}`` (checked for syntax,
never run: say why). ``text`` and ``mermaid`` blocks are pictures and sample output, not code.
Every other block is code: ``sh`` and ``python`` run against the demo (``make demo``: the demo's
tokens, port 8000, which a test replaces with its own), ``toml`` is loaded as an ldptel config,
``json``/``yaml`` parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = {"sh", "python", "toml", "json", "yaml"}
PICTURES = {"text", "mermaid"}
# the JavaScript SDK's browser and Node examples: run by tests/test_docs.py against the demo (a page
# in Chromium, a Node process) and the sealed one by tests/test_sdk_js_sealed.py, only in docs/sdk-js.md
JS = {"html", "js"}
JS_DOC = ROOT / "docs" / "sdk-js.md"
FENCE = re.compile(r"^```(\S*)\s*(.*)$")
NO_RUN = re.compile(r"^\{no-run: (.+)\}$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|<(https?://[^>\s]+)>")
DEMO = "127.0.0.1:8000"


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    no_run: str | None  # why it is not run
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start, lang, info = i, m.group(1), m.group(2).strip()
        i += 1
        body = []
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        reason = NO_RUN.match(info)
        if info and reason is None:
            raise ValueError(f"{path}:{start + 1}: info string {info!r}: only {{no-run: why}} may "
                             "follow the language")
        out.append(Block(path, start + 1, lang, reason.group(1) if reason else None, "\n".join(body) + "\n"))
        i += 1
    return out


def all_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks(path)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, inside = set(), False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and autolink outside code blocks."""
    out, inside = [], False
    for n, line in enumerate(path.read_text().split("\n"), 1):
        if line.startswith("```"):
            inside = not inside
            continue
        if inside:
            continue
        for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            out.append((n, m.group(1) or m.group(2)))
    return out


def section(path: Path, title: str) -> str:
    """The Markdown of the ``## title`` section of ``path``."""
    text = path.read_text()
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]
