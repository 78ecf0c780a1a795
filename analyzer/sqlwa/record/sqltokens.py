"""SQL text split as SQLite splits it: tokens by the rules of its tokenizer
(src/tokenize.c, ``sqlite3GetToken``) and statements by those of ``sqlite3_complete``
(src/complete.c), both in one pass over the text, so a file or a log of any size and
shape is read in time linear in its length.

A token is ``(kind, text)``; the kinds:

- ``space`` and ``comment`` (``--`` to the end of the line; ``/*`` to ``*/`` or to the
  end of the text: SQLite ends an unterminated one there);
- ``string`` (``'…'``, a doubled ``''`` inside), ``blob`` (``x'…'`` of an even number of
  hex digits), ``number`` (decimal, ``.5``, ``1e-3``, ``0x…`` hex, any number of digits;
  ``_`` between digits as SQLite 3.46 reads it);
- ``dq`` (``"…"``: an identifier, or a string where no column has that name), ``id``
  (``` `…` ``, ``[…]``: always identifiers), ``word`` (a bare keyword or identifier);
- ``variable`` (``?1``, ``:name``, ``@name``, ``$name``), ``op`` (operators, ``(``,
  ``)``, ``,``, ``;``, ``.``);
- ``illegal``: what SQLite refuses (an unterminated quote, ``x'1'``, ``12abc``), kept
  apart so no literal hides in it.

Characters are classed as SQLite classes bytes: ASCII letters, digits, ``_`` and ``$``
and every non-ASCII character are identifier characters (``IdChar``); only ASCII digits
are digits (a Unicode digit such as U+0661 is an identifier character)."""

from __future__ import annotations

import re
from collections.abc import Iterator

Token = tuple[str, str]

_IDCHAR = r"0-9A-Za-z_$\u0080-\U0010ffff"
_DIGITS = r"[0-9](?:_?[0-9])*+"
_HEX = r"[0-9a-fA-F](?:_?[0-9a-fA-F])*+"
_TOKEN = re.compile(
    "|".join(
        (
            r"(?P<space>[ \t\n\f\r]++)",
            r"(?P<comment>--[^\n]*+|/\*(?:[^*]++|\*(?!/))*+(?:\*/)?)",
            r"(?P<string>'[^']*+(?:''[^']*+)*+')",
            r"(?P<dq>\"[^\"]*+(?:\"\"[^\"]*+)*+\")",
            r"(?P<id>`[^`]*+(?:``[^`]*+)*+`|\[[^\]]*+\])",
            r"(?P<blob>[xX]'(?:[0-9a-fA-F]{2})*+')(?![" + _IDCHAR + "])",
            r"(?P<badblob>[xX]'[^']*+'?)",
            r"(?P<number>(?:0[xX]" + _HEX + "|(?:" + _DIGITS + r"(?:\.(?:" + _DIGITS + r")?)?|\." + _DIGITS + ")"
            r"(?:[eE][+-]?" + _DIGITS + ")?)(?![" + _IDCHAR + "]))",
            r"(?P<variable>\?[0-9]*+|[:@#$][" + _IDCHAR + r"]++(?:::[" + _IDCHAR + r"]++)*+(?:\([^)\s]*+\))?)",
            r"(?P<word>[A-Za-z_\u0080-\U0010ffff][" + _IDCHAR + "]*+)",
            r"(?P<op>->>|->|<<|>>|<=|>=|==|!=|<>|\|\||[-+*/%&|~<>=(),;.])",
            # SQLite's TK_ILLEGAL, taken as far as SQLite takes it: an unterminated quote
            # to the end, a number or blob run on into identifier characters
            r"(?P<illegal>['\"`][\s\S]*+|\[[\s\S]*+|[0-9.][" + _IDCHAR + r"]*+|[\s\S])",
        )
    )
)


def tokens(sql: str) -> Iterator[Token]:
    """Every token of ``sql``, in order; their texts joined are ``sql`` again."""
    at, end = 0, len(sql)
    while at < end:
        match = _TOKEN.match(sql, at)
        assert match is not None and match.lastgroup is not None  # "illegal" takes any character
        kind = match.lastgroup
        yield ("illegal" if kind == "badblob" else kind), match.group()
        at = match.end()


def fold(name: str) -> str:
    """A name as SQLite compares names: ASCII letters without case."""
    return name.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def unquote(text: str) -> str:
    """The name inside ``"…"``, `` `…` `` or ``[…]``."""
    if text[0] == "[":
        return text[1:-1]
    return text[1:-1].replace(text[0] * 2, text[0])


class Statement:
    """One statement's tokens, with what the redaction needs to know of each one's place.
    Significant tokens (not space, not comment) are numbered from 0; a number past
    either end (by up to PAD) reads as an empty token."""

    PAD = 8

    def __init__(self, sql: str) -> None:
        self.tokens: list[Token] = list(tokens(sql))
        self.sig = [i for i, (kind, _) in enumerate(self.tokens) if kind not in ("space", "comment")]
        pad = [""] * self.PAD
        kinds = [self.tokens[i][0] for i in self.sig]
        texts = [self.tokens[i][1] for i in self.sig]
        self._kinds = pad + kinds + pad
        self._texts = pad + texts + pad
        self._words = pad + [t.upper() if k == "word" else "" for k, t in zip(kinds, texts, strict=True)] + pad
        self.closing, self.opener = self._matching_parens(texts)

    def kind(self, j: int) -> str:
        """The kind of the j-th significant token ("" past either end)."""
        return self._kinds[j + self.PAD] if j >= -self.PAD else ""

    def text(self, j: int) -> str:
        return self._texts[j + self.PAD] if j >= -self.PAD else ""

    def word(self, j: int) -> str:
        """The j-th significant token upper-cased if it is a bare word, else ""."""
        return self._words[j + self.PAD] if j >= -self.PAD else ""

    @staticmethod
    def _matching_parens(texts: list[str]) -> tuple[dict[int, int], list[int]]:
        """Each "(" -> its ")"; and per token, its innermost open "(" (-1: none). Only an
        operator's text is a bare parenthesis."""
        closing: dict[int, int] = {}
        opener: list[int] = []
        open_at: list[int] = []
        for j, text in enumerate(texts):
            opener.append(open_at[-1] if open_at else -1)
            if text == "(":
                open_at.append(j)
            elif text == ")" and open_at:
                closing[open_at.pop()] = j
        return closing, opener

    def name(self, j: int) -> str:
        """The j-th significant token as a name (folded, unquoted) if it can be one, else ""."""
        kind = self.kind(j)
        if kind == "word":
            return fold(self.text(j))
        return fold(unquote(self.text(j))) if kind in ("dq", "id") else ""


def significant_span(sql: str) -> tuple[int, str]:
    """The text from the first token that is neither white space nor a comment to the
    last one, and where it starts in ``sql`` ("" when there is none: white space and
    comments only). What lies around is no part of the statement: SQLite's parser skips
    it, and stores a CREATE from its first token to its last (lang_comment.html: a
    comment may stand wherever white space may); comments between tokens are kept."""
    at, start, end = 0, -1, 0
    for kind, text in tokens(sql):
        if kind not in ("space", "comment"):
            start = at if start < 0 else start
            end = at + len(text)
        at += len(text)
    return (start, sql[start:end]) if start >= 0 else (len(sql), "")


def first_word(sql: str) -> str:
    """The statement's first keyword, upper-cased ("" when it starts otherwise)."""
    for kind, text in tokens(sql):
        if kind in ("space", "comment"):
            continue
        return text.upper() if kind == "word" else ""
    return ""


# --- statement ends: sqlite3_complete's state machine -------------------------------
SEMI, WS, OTHER, EXPLAIN, CREATE, TEMP, TRIGGER, END = range(8)
#: complete.c's transitions: state x token -> state; state 1 (START) after a ";" is an end
TRANSITIONS = (
    (1, 0, 2, 3, 4, 2, 2, 2),  # 0 NOTHING
    (1, 1, 2, 3, 4, 2, 2, 2),  # 1 START
    (1, 2, 2, 2, 2, 2, 2, 2),  # 2 NORMAL
    (1, 3, 3, 2, 4, 2, 2, 2),  # 3 EXPLAIN
    (1, 4, 2, 2, 2, 4, 5, 2),  # 4 CREATE
    (6, 5, 5, 5, 5, 5, 5, 5),  # 5 TRIGGER
    (6, 6, 5, 5, 5, 5, 5, 7),  # 6 SEMI
    (1, 7, 5, 5, 5, 5, 5, 5),  # 7 END
)
KEYWORD_CLASSES = {
    "CREATE": CREATE,
    "TRIGGER": TRIGGER,
    "TEMP": TEMP,
    "TEMPORARY": TEMP,
    "END": END,
    "EXPLAIN": EXPLAIN,
}
#: complete.c's own lexing, which differs from the tokenizer's in small ways (a quote
#: ends at the next one of its kind; an identifier is any run of IdChar, digits first
#: too); quotes and comments are followed to their end by OPENERS' closers
_COMPLETE_PIECE = re.compile(
    r"(?P<semi>;)|(?P<ws>[ \r\t\n\f]++)|(?P<open>['\"`\[]|/\*|--)|(?P<ident>[" + _IDCHAR + r"]++)|(?P<other>[\s\S])"
)
#: what ends each quote or comment, and what complete.c takes it as once ended
OPENERS = {
    "'": ("'", OTHER),
    '"': ('"', OTHER),
    "`": ("`", OTHER),
    "[": ("]", OTHER),
    "/*": ("*/", WS),
    "--": ("\n", WS),
}


class Splitter:
    """Statements out of a file's lines, each ending where ``sqlite3_complete`` would say
    the text so far is complete. Each line is looked at once: a statement of any length,
    or one never closed, costs time linear in its length. Feed whole lines (a quote or
    comment may span lines; no other token does)."""

    def __init__(self) -> None:
        self.parts: list[str] = []  # the unfinished statement's text so far
        self.state = 0
        self.closer = ""  # what ends the quote or comment the text is inside ("": none)
        self.closed_as = OTHER
        #: whether the unfinished text is all white space (str.isspace's)
        self.blank = True

    def feed(self, line: str) -> list[str]:
        """Add a line; the statements it completed, each with its final ``;``."""
        done: list[str] = []
        start = at = 0
        while at < len(line):
            if self.closer:
                close = line.find(self.closer, at)
                if close < 0:
                    break
                at = close + len(self.closer)
                self.closer = ""
                self.state = TRANSITIONS[self.state][self.closed_as]
                continue
            match = _COMPLETE_PIECE.match(line, at)
            assert match is not None and match.lastgroup is not None  # "other" takes any character
            kind, at = match.lastgroup, match.end()
            if kind == "open":
                self.closer, self.closed_as = OPENERS[match.group()]
            elif kind == "semi":
                self.state = TRANSITIONS[self.state][SEMI]
                if self.state == 1:
                    done.append("".join(self.parts) + line[start:at])
                    self.parts, self.state, self.blank, start = [], 0, True, at
            else:
                token = KEYWORD_CLASSES.get(match.group().upper(), OTHER) if kind == "ident" else OTHER
                self.state = TRANSITIONS[self.state][WS if kind == "ws" else token]
        tail = line[start:]
        if tail:
            self.parts.append(tail)
            self.blank = self.blank and not tail.strip()
        return done

    def reset(self) -> None:
        """Drop the unfinished text (white space the caller has no use for)."""
        self.__init__()  # type: ignore[misc]

    def rest(self) -> str:
        """What is left that no ``;`` completed."""
        return "".join(self.parts)
