#!/usr/bin/env python3
"""Checks that every relative link in README.md, CHANGELOG.md and docs/*.md names a file that exists
and, for a link with a #fragment into a Markdown file, a heading of that file (GitHub's anchors).
Standard library only; prints each broken link and exits 1 if there is one.

Usage: scripts/check-doc-links.py [files...]   (default: README.md CHANGELOG.md docs/*.md)"""
import os
import re
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(path):
    """The file's lines outside fenced code blocks, with inline code blanked out."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield number, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    out = []
    for ch in text.lower():
        if ch in " -":
            out.append("-" if ch == " " else ch)
        elif ch == "_" or ch.isalnum() or unicodedata.category(ch).startswith("M"):
            out.append(ch)
    return "".join(out)


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, found = {}, set()
        for _, line in prose_lines_raw(path):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        _anchors[path] = found
    return _anchors[path]


def prose_lines_raw(path):
    inside = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield number, line


def check(path):
    broken = []
    for number, line in prose_lines(path):
        for m in LINK.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, fragment = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{os.path.relpath(path, ROOT)}:{number}: {target}"
            if not os.path.exists(dest):
                broken.append(f"{where}: no file {os.path.relpath(dest, ROOT)}")
            elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                broken.append(f"{where}: no heading #{fragment} in {os.path.relpath(dest, ROOT)}")
    return broken


def main():
    files = sys.argv[1:] or [
        os.path.join(ROOT, f) for f in ["README.md", "CHANGELOG.md"] if os.path.exists(os.path.join(ROOT, f))
    ] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")
    )
    broken = [b for f in files for b in check(os.path.abspath(f))]
    for b in broken:
        print(b)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
