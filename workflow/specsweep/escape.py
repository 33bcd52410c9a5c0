"""Data as inert text, one helper per format a data string reaches.

Names (models, workloads, ladder steps, runs), devices, settings vLLM reported, error messages read from files,
paths and command-line values are data, not markup: each boundary where one becomes text of a format escapes it
with the helper for that format, so that it renders as itself and carries no control sequence.

- a terminal: :func:`term_text` (control characters, ANSI escapes, bidi overrides and line breaks as their
  Python escapes: ``\\x1b``, ``\\n``, ``\\u202e``);
- Markdown: :func:`md_text` (inline text and table cells) and :func:`md_code` (a code span);
- matplotlib: :data:`MPL_RC`, the rc settings every figure is drawn under (no mathtext: ``$...$`` in a label
  renders as the characters it is);
- a figure's text (SVG, PNG metadata): :func:`figure_text` and :func:`inert_figure`, applied to every text of a
  figure as it is saved (no control character reaches an SVG, which would then not be well-formed XML);
- reST (the Snakemake report's captions): :func:`specsweep.captions.rst_text`.

Every helper returns a name made of letters, digits, ``.``, ``-`` and ``_`` (the names a config admits)
unchanged, so committed outputs of ordinary runs do not change."""

from __future__ import annotations

import re
from typing import Any

#: Characters CommonMark (and GitHub's tables, math and strikethrough) can read as markup anywhere in a line:
#: backslash escapes, code spans, emphasis, links and images, raw HTML and entities, table cells, math,
#: strikethrough. A backslash before any of them renders the character itself.
_MD_ALWAYS = frozenset("\\`*[]<>|&$~")
#: Underscore emphasis opens or closes only where an underscore is not between two letters or digits.
_MD_LONE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")

#: matplotlib's settings for text drawn from data: no mathtext (``$\\alpha$`` is drawn as those characters;
#: a malformed ``$\\x$`` can no longer fail the render). The figures' own words use none.
MPL_RC: dict[str, Any] = {"text.parse_math": False}


def term_text(value: object) -> str:
    """``value`` as text for a terminal: every character that is not printable (control characters, the
    escape that starts an ANSI sequence, a carriage return, a line break, a bidi override) as its Python
    escape, so that the text cannot move the cursor, recolour or clear the screen, or forge a line."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def md_text(value: object) -> str:
    """``value`` as Markdown inline text that renders as itself, in a table cell too: no line of its own
    (line breaks as ``\\n``, see :func:`term_text`), every markup character backslash-escaped (pipes, backticks,
    emphasis, link brackets, HTML tags and entities, math, strikethrough)."""
    text = "".join("\\" + ch if ch in _MD_ALWAYS else ch for ch in term_text(value))
    return _MD_LONE_UNDERSCORE.sub(r"\\_", text)


def md_code(value: object) -> str:
    """``value`` as a Markdown code span outside a table (a path, a command): fenced by more backticks than
    any run inside it, padded with a space where it starts or ends with a backtick; no line breaks."""
    text = term_text(value)
    runs = [len(m) for m in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_url(path: str) -> str:
    """A relative path as a Markdown link destination: a space, a parenthesis, an angle bracket or a control
    character in it percent-encoded, so that it can neither end the link nor start another."""
    from urllib.parse import quote

    return quote(path, safe="/@:+~!$&'*,;=%#?")


def md_cell(markdown: str) -> str:
    """Markdown of our own making (a rule, a claim's evidence with its code spans) as one table cell: a pipe
    not already escaped escaped, a line break as a space; the names and values inside it went through
    :func:`md_text` where they were put in, or are the config's names."""
    text = " ".join(markdown.splitlines())
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def figure_text(value: object) -> str:
    """``value`` as text drawn in a figure: as :func:`term_text`, but a line break stays one (the figures' own
    titles wrap); every other character that is not printable (ESC, BEL, a bidi override) as its Python escape,
    so that no control character reaches an SVG (XML 1.0 admits none) or PNG metadata."""
    text = str(value)
    if text.isprintable():
        return text
    return "\n".join(term_text(line) for line in text.split("\n"))


def inert_figure(fig: Any) -> None:
    """Every text artist of a matplotlib figure (titles, labels, tick labels, legends, annotations) through
    :func:`figure_text`, in place, before it is saved."""
    from matplotlib.text import Text

    for artist in fig.findobj(Text):
        text = artist.get_text()
        if not text.isprintable() and figure_text(text) != text:
            artist.set_text(figure_text(text))
