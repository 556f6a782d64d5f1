"""A crate's module tree as its source declares it, for the checks in scripts/.

`crate_modules(src)` follows `mod name;` declarations from the crate root (`lib.rs`, else
`main.rs`), leaving out modules declared under `#[cfg(test)]` (and `#[cfg(all(test, …))]`) — test
modules and test-only files are not part of what the crate builds. Each module's text comes with
comments, string literals and `#[cfg(test)]` items removed (`strip_test_items`), so what remains is
the code a build compiles.
"""
import os
import re

ITEM_START = re.compile(r"#\s*\[\s*cfg\s*\(\s*(?:test|all\s*\(\s*test\b[^\]]*)\s*\)\s*\]")
MOD_DECL = re.compile(r"\b(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")


def strip_comments_and_strings(text):
    """Text with comments and string/char literals blanked, line breaks kept (so line counts hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(?:\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _item_end(text, start):
    """Where the item that begins at `start` ends: after its balanced `{…}` body or its `;`."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "{":
            j, level = i, 0
            while j < n:
                if text[j] == "{":
                    level += 1
                elif text[j] == "}":
                    level -= 1
                    if level == 0:
                        return j + 1
                j += 1
            return n
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def strip_test_items(text):
    """Code with every `#[cfg(test)]` item (a module, a function, a `use`) blanked, lines kept."""
    text = strip_comments_and_strings(text)
    while True:
        m = ITEM_START.search(text)
        if not m:
            return text
        end = _item_end(text, m.end())
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), end) + text[end:]


def crate_modules(src, root_file=None):
    """{"a::b": (path, stripped text)} for every module the crate builds; the root is ""."""
    if root_file is None:
        root_file = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
    found = {}

    def visit(name, path, directory):
        text = strip_test_items(open(path, encoding="utf-8").read())
        found[name] = (path, text)
        for child in MOD_DECL.findall(text):
            for candidate in (os.path.join(directory, child + ".rs"), os.path.join(directory, child, "mod.rs")):
                if os.path.exists(candidate):
                    child_name = child if not name else name + "::" + child
                    visit(child_name, candidate, os.path.join(directory, child))
                    break

    visit("", os.path.join(src, root_file), src)
    return found
