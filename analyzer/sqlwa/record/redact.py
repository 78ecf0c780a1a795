"""``--redact``: a log's literal values replaced with made-up ones that SQLite stores in
the same number of bytes, so a replay writes what the app wrote, size for size, without
the app's data. docs/sql-log-format.md ("Redaction") is the user's account of the rule;
this is the how.

Statements are split into tokens by SQLite's own rules (:mod:`sqlwa.record.sqltokens`),
never by keywords, and every token that is a literal is replaced, in every statement
(CREATE, trigger bodies, CREATE TABLE … AS SELECT and the trigger steps SQLite reports
included):

- a string: the same number of UTF-8 bytes, of ASCII letters and digits (and as many
  ``'`` as it had, at its end, so the statement's text keeps its length too); one that
  SQLite would read as a number (``'42'``, ``' -1.5e3'``) stays one of the same form;
- a blob ``X'…'``: the same number of bytes;
- an integer: one of the same storage class (SQLite stores 0 and 1 in no bytes, then 1,
  2, 3, 4, 6 or 8 bytes by magnitude: fileformat2.html, "Record Format") and the same
  number of digits, by a keyed permutation of those values (a 4-round Feistel network on
  HMAC-SHA256, walked until it lands in the range): distinct values stay distinct and
  none can be worked back without the key. 0 and 1 are kept: no other value takes no
  bytes. Past 2**63 - 1 (SQLite makes those reals) the digits are drawn afresh;
- a real: a real again, its digits drawn afresh (leading zeros and the exponent kept),
  integral if it was (SQLite stores those in REAL columns as integers);
- a comment: its text becomes spaces (the same bytes: a CREATE statement's text is
  stored in the schema);
- a double-quoted token that SQLite may take as a string: replaced like a string, and
  single-quoted, so it is a string on replay too. It is kept only where SQLite reads a
  name alone (:meth:`Redactor._name_position`) or when its name is one the log shows as
  a name anyway (:attr:`Redactor.names`): kept, it adds no text the log lacks;
- an unterminated quote or other token SQLite refuses: its letters and digits blanked.

The same literal gets the same replacement throughout a log (a row inserted and later
updated by a value it holds still matches), under a key drawn afresh for each log.
Kept as written, because they are no data of the app's users but settings or sizes the
replay needs: PRAGMA arguments that are numbers or SQLite's setting words; the numbers
given to ``zeroblob()`` and ``randomblob()`` (the size of a value, which redaction keeps
anyway); SQLite's own date words and formats given to its date functions (``'now'``,
``'%Y-%m-%d'``); a virtual table's module arguments (its schema); row keys SQLite chose
(:mod:`sqlwa.record.rowkeys`), so the replay updates the rows it inserted."""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re
from collections.abc import Callable

from sqlwa.record.rowkeys import RowKeys
from sqlwa.record.sqltokens import Statement, fold, unquote

#: SQLite's integer storage classes: bytes of the record field, and the largest value
INT_CLASSES = ((1, 2**7 - 1), (2, 2**15 - 1), (3, 2**23 - 1), (4, 2**31 - 1), (6, 2**47 - 1), (8, 2**63 - 1))
INT_TOP = INT_CLASSES[-1][1]
ALPHABET = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
#: a string SQLite's numeric affinity turns into a number (sqlite3AtoF: ASCII space around)
NUMERIC_TEXT = re.compile(
    r"(?P<lead>[ \t\n\v\f\r]*[+-]?)(?P<num>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(?P<trail>[ \t\n\v\f\r]*)"
)
REAL_PARTS = re.compile(r"(?P<int>[0-9]*)(?P<dot>\.?)(?P<frac>[0-9]*)(?P<exp>[eE][+-]?[0-9]+)?")
#: names SQLite knows without a schema: a double-quoted one is never a string
BUILTIN_NAMES = frozenset({"rowid", "oid", "_rowid_", "main", "temp", "nocase", "binary", "rtrim"})
#: a double-quoted token right after one of these names something (a table, an alias,
#: a collation, a savepoint), which SQLite never reads as a string
NAME_AFTER = frozenset(
    "AS COLLATE TABLE VIEW INDEX TRIGGER EXISTS INTO FROM JOIN UPDATE REFERENCES TO COLUMN RENAME ADD DROP "
    "SAVEPOINT RELEASE PRAGMA WITH RECURSIVE".split()
)
#: after DEFAULT, a bare word other than these is the default's text (parse.y: DEFAULT id)
DEFAULT_KEYWORDS = frozenset("NULL TRUE FALSE CURRENT_TIME CURRENT_DATE CURRENT_TIMESTAMP".split())
#: values of PRAGMAs that are settings (pragma.html): kept when quoted too
SETTING_WORDS = frozenset(
    "wal delete truncate persist memory off on normal full extra exclusive utf-8 utf-16 utf-16le utf-16be utf8 "
    "utf16 utf16le utf16be none incremental default file true false yes no fast restart passive".split()
)
#: the words a statement after a WITH clause starts with
MAIN_WORDS = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "VALUES"})
SIZE_FUNCTIONS = frozenset({"ZEROBLOB", "RANDOMBLOB"})
DATE_FUNCTIONS = frozenset({"DATE", "TIME", "DATETIME", "JULIANDAY", "UNIXEPOCH", "STRFTIME", "TIMEDIFF"})
#: SQLite's own words and %-formats for its date functions (lang_datefunc.html)
DATE_TEXT = re.compile(
    r"(?:now|localtime|utc|unixepoch|auto|julianday|subsec|subsecond|start of (?:month|year|day)"
    r"|%[a-zA-Z%]|[-:/ .,T])*",
    re.IGNORECASE,
)
KEPT_KINDS = frozenset({"space", "word", "id", "variable", "op"})


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class Context:
    """Where a significant token stands: its segment's kind and the parentheses open."""

    def __init__(self) -> None:
        self.segment: list[str] = []  # the first words of the ;-separated segment
        self.parens: list[tuple[str, str]] = []  # per open "(": (function name, list kind)
        self.ons = 0  # ON words outside parentheses so far
        self.main_started = False  # past a WITH clause's common table expressions

    def function(self) -> str:
        return self.parens[-1][0] if self.parens else ""

    def list_kind(self) -> str:
        return self.parens[-1][1] if self.parens else ""

    def in_with_clause(self) -> bool:
        return self.starts("WITH") and not self.main_started

    def starts(self, *words: str) -> bool:
        return tuple(self.segment[: len(words)]) == words

    def creates(self, what: str) -> bool:
        """Whether the segment is CREATE [TEMP] [UNIQUE] <what>."""
        rest = [w for w in self.segment[1:4] if w not in ("TEMP", "TEMPORARY", "UNIQUE")]
        return self.starts("CREATE") and rest[:1] == [what]


class Redactor:
    """Replaces the literals of SQL statements; one instance per log (one key)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = os.urandom(32) if key is None else key
        #: names the log has shown as names (bare, `…`, […], or "…" where only a name
        #: can stand), ASCII case folded: a double-quoted token among them is kept
        self.names: set[str] = set(BUILTIN_NAMES)
        self._cache: dict[tuple[str, str], str] = {}
        self.rows = RowKeys()

    # --- statements ------------------------------------------------------------------
    def redact(self, sql: str, trigger: bool = False) -> str:
        """``sql`` with its literals replaced. ``trigger``: a trigger step as SQLite
        reports it, ``-- `` then the step's text, which is redacted as a statement."""
        if trigger and sql.startswith("--"):
            body = sql[2:]
            lead = len(body) - len(body.lstrip(" "))
            return "--" + body[:lead] + self.redact(body[lead:])
        statement = Statement(sql)
        kept_keys = self.rows.kept(statement)
        out = [text for _, text in statement.tokens]
        #: replacements kept back until every name of the statement is known: a name
        #: the statement shows as one (further on, too) keeps its quoted token
        unless_named: list[tuple[int, str, str]] = []
        context = Context()
        for j, i in enumerate(statement.sig):
            self._step(statement, j, context)
            kind, text = statement.kind(j), statement.text(j)
            if self._learn_name(statement, j, context):
                continue
            replacement = None if j in kept_keys else self._replacement(statement, j, context)
            if replacement is None:
                continue
            if kind == "dq" or (kind == "string" and context.starts("PRAGMA")):
                unless_named.append((i, replacement, fold(unquote(text))))
            else:
                out[i] = replacement
        for i, replacement, name in unless_named:
            if name not in self.names:
                out[i] = replacement
        for i, (kind, text) in enumerate(statement.tokens):
            if kind == "comment":
                out[i] = blank_comment(text)
        return "".join(out)

    def _learn_name(self, statement: Statement, j: int, context: Context) -> bool:
        """Add the j-th token to the names known if it is one; whether it is a
        double-quoted token that stands where only a name can (then it is kept)."""
        kind, text = statement.kind(j), statement.text(j)
        if kind == "word" and not self._default_text(statement, j):
            self.names.add(fold(text))
        elif kind == "id":
            self.names.add(fold(unquote(text)))
        elif kind == "dq" and self._name_position(statement, j, context):
            self.names.add(fold(unquote(text)))
            return True
        return False

    def _step(self, statement: Statement, j: int, context: Context) -> None:
        """Move ``context`` onto the j-th significant token."""
        kind, text = statement.kind(j), statement.text(j)
        prev = statement.text(j - 1) if j > 0 and statement.kind(j - 1) == "op" else ""
        if j > 0 and prev == "(":
            context.parens.append(self._paren(statement, j - 1, context))
        if kind == "op" and text == ")" and context.parens:
            context.parens.pop()
        if kind == "op" and text == ";":
            context.segment, context.parens, context.ons, context.main_started = [], [], 0, False
        elif kind == "word" and not context.parens:
            word = text.upper()
            if len(context.segment) < 6:
                context.segment.append(word)
            context.ons += word == "ON"
            context.main_started = context.main_started or word in MAIN_WORDS

    def _paren(self, statement: Statement, j: int, context: Context) -> tuple[str, str]:
        """(function name, list kind) of the "(" at significant position j. A list kind:
        "columns" (a CREATE TABLE's column definitions), "names" (a view's or a common
        table expression's column names), "module" (a virtual table's arguments)."""
        before = j - 1
        name = statement.word(before) or (
            unquote(statement.text(before)).upper() if statement.kind(before) == "dq" else ""
        )
        if context.parens:
            return name, "module" if context.list_kind() == "module" else ""
        if context.creates("VIRTUAL") and statement.word(before - 1) == "USING":
            return name, "module"
        declared = statement.kind(before) in ("word", "dq", "id")
        after_name = statement.word(before - 1) in ("TABLE", "VIEW", "EXISTS") or statement.text(before - 1) == "."
        if declared and after_name and context.creates("TABLE"):
            return name, "columns"
        close = statement.closing.get(j)
        names_follow_as = close is not None and statement.word(close + 1) == "AS"
        cte_name = context.in_with_clause() and statement.word(before - 1) in ("WITH", "RECURSIVE", "")
        if declared and names_follow_as and ((after_name and context.creates("VIEW")) or cte_name):
            return name, "names"
        return name, ""

    def _name_position(self, statement: Statement, j: int, context: Context) -> bool:
        """Whether the double-quoted token at j stands where SQLite reads only a name."""
        prev_op = statement.text(j - 1) if statement.kind(j - 1) == "op" else ""
        next_op = statement.text(j + 1) if statement.kind(j + 1) == "op" else ""
        if prev_op == "." or next_op in (".", "("):
            return True
        before, before2 = statement.word(j - 1), statement.word(j - 2)
        if before in NAME_AFTER and not (before == "FROM" and before2 == "DISTINCT"):
            return True
        if before == "BY" and before2 == "INDEXED":
            return True
        if before == "ON" and context.ons == 1 and (context.creates("INDEX") or context.creates("TRIGGER")):
            return True  # CREATE INDEX … ON "t", CREATE TRIGGER … ON "t": the table
        if statement.word(j + 1) == "AS" and (
            statement.text(j + 2) == "(" or statement.word(j + 2) in ("MATERIALIZED", "NOT")
        ):
            return True  # a common table expression's name
        return prev_op in ("(", ",") and context.list_kind() in ("columns", "names")

    def _default_text(self, statement: Statement, j: int) -> bool:
        """A bare word SQLite takes as a column's default text (DEFAULT word)."""
        return statement.word(j - 1) == "DEFAULT" and statement.word(j) not in DEFAULT_KEYWORDS | {"VALUES", ""}

    def _replacement(self, statement: Statement, j: int, context: Context) -> str | None:
        """The j-th significant token's replacement, None to keep it; for a double-quoted
        token or a PRAGMA's string, unless its name is one the log knows (:meth:`redact`
        looks once the statement's names are all known)."""
        kind, text = statement.kind(j), statement.text(j)
        if kind in KEPT_KINDS:
            return self.word_like(text) if kind == "word" and self._default_text(statement, j) else None
        if context.list_kind() == "module":
            return None
        if context.starts("PRAGMA") and self._setting(kind, text):
            return None
        if kind == "dq":
            return quoted(self.string(unquote(text)))
        if kind == "string":
            inner = unquote(text)
            if context.function() in DATE_FUNCTIONS and DATE_TEXT.fullmatch(inner):
                return None
            return quoted(self.string(inner))
        if kind == "blob":
            return text[:2] + self.blob_hex(text[2:-1]) + "'"
        if kind == "number":
            if context.function() in SIZE_FUNCTIONS and statement.text(j - 1) in ("(", ","):
                return None
            return self.number(text)
        return blank_illegal(text)

    def _setting(self, kind: str, text: str) -> bool:
        """Whether a PRAGMA's argument is a setting: a number or a setting word (or a
        name: :meth:`redact` keeps those)."""
        if kind == "number":
            return True
        if kind in ("string", "dq"):
            inner = fold(unquote(text))
            return inner in SETTING_WORDS or inner.lstrip("+-").isdigit()
        return False

    # --- values ----------------------------------------------------------------------
    def _stream(self, label: bytes, value: bytes, size: int) -> bytes:
        """``size`` pseudo-random bytes, the same for the same label and value."""
        out = b""
        counter = 0
        while len(out) < size:
            out += hmac.new(self.key, label + counter.to_bytes(4, "big") + value, hashlib.sha256).digest()
            counter += 1
        return out[:size]

    def _cached(self, kind: str, value: str, make: Callable[[str], str]) -> str:
        key = (kind, value)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 200_000:
                self._cache.clear()  # bounded memory; each replacement is a function of the key alone
            found = self._cache[key] = make(value)
        return found

    def string(self, text: str) -> str:
        """A string of the same UTF-8 byte length; a number SQLite would read from it
        stays a number of the same form."""
        return self._cached("str", text, self._string)

    def _string(self, text: str) -> str:
        numeric = NUMERIC_TEXT.fullmatch(text)
        if numeric is not None:
            num = numeric["num"]
            is_int = num.isdigit()
            return (
                numeric["lead"] + (self.decimal(num) if is_int else self.real(num, keep_length=True)) + numeric["trail"]
            )
        raw = text.encode("utf-8", "surrogatepass")
        quotes = raw.count(b"'")  # kept as many (at the end): a CREATE's text keeps its length
        noise = self._stream(b"str", raw, len(raw) - quotes)
        return bytes(ALPHABET[b % len(ALPHABET)] for b in noise).decode() + "'" * quotes

    def word_like(self, text: str) -> str:
        """A bare word of the same UTF-8 length that is no keyword (it has a digit)."""
        size = utf8_len(text)
        noise = self._stream(b"word", text.encode("utf-8", "surrogatepass"), size)
        letters = [chr(ord("a") + b % 26) for b in noise]
        if size > 1:
            letters[-1] = str(noise[-1] % 10)
        return "".join(letters)

    def blob_hex(self, hex_digits: str) -> str:
        return self._stream(b"blob", hex_digits.lower().encode(), len(hex_digits) // 2).hex()

    def number(self, token: str) -> str:
        """A number token's replacement: an integer of the same class and digits, or a real."""
        clean = token.replace("_", "")
        if clean[:2].lower() == "0x":
            mapped = self._cached("hex", clean[2:], self.hex_digits)
            return token[:2] + mapped
        if clean.isdigit():
            mapped = self._cached("dec", clean, self.decimal)
        else:
            mapped = self._cached("real", clean, self.real)
        return with_separators(token, mapped) if "_" in token and len(mapped) == len(clean) else mapped

    def decimal(self, digits: str) -> str:
        """Decimal digits (leading zeros kept) of an integer of the same storage class
        and number of digits; past SQLite's integers, fresh digits above 2**63 - 1."""
        significant = digits.lstrip("0") or "0"
        lead = digits[: len(digits) - len(significant)]
        if len(significant) > 19 or int(significant) > INT_TOP:  # never int() of thousands of digits
            return lead + self._huge(significant)
        return lead + str(self.integer(int(significant)))

    def _huge(self, digits: str) -> str:
        """Fresh digits, as many, for a number SQLite takes as a real (> 2**63 - 1)."""
        candidate = "9" * len(digits)
        for attempt in range(32):
            noise = self._stream(b"huge" + bytes([attempt]), digits.encode(), len(digits))
            candidate = str(1 + noise[0] % 9) + "".join(str(b % 10) for b in noise[1:])
            if len(digits) > 19 or int(candidate) > INT_TOP:
                return candidate
        return "9" * len(digits)

    def hex_digits(self, digits: str) -> str:
        """Hex digits (as many, the same case) of an integer of the same storage class."""
        upper = any(c in "ABCDEF" for c in digits)
        if len(digits) > 16:  # "hex literal too big": SQLite refuses it; its digits go all the same
            out = self._stream(b"hexbig", digits.lower().encode(), (len(digits) + 1) // 2).hex()[: len(digits)]
        else:
            value = int(digits, 16)
            if value >= 2**63:  # a negative integer, two's complement
                magnitude = 2**64 - value
                low, high = negative_class(magnitude)
                out = f"{2**64 - self._permute(magnitude, low, high):016x}"
            else:
                out = f"{self.integer(value, base=16):x}".rjust(len(digits), "0")
        return out.upper() if upper else out

    def integer(self, value: int, base: int = 10) -> int:
        """``value`` (≥ 0) permuted among the values of its storage class with as many
        digits in ``base``; 0 and 1 stay (they alone take no bytes)."""
        if value <= 1:
            return value
        size = next(size for size, top in INT_CLASSES if value <= top)
        smaller = [top for s, top in INT_CLASSES if s < size]
        class_low, class_high = (smaller[-1] + 1 if smaller else 2), dict(INT_CLASSES)[size]
        width = len(f"{value:x}") if base == 16 else len(str(value))
        low = max(class_low, base ** (width - 1))
        high = min(class_high, base**width - 1)
        return self._permute(value, low, high)

    def _permute(self, value: int, low: int, high: int) -> int:
        """A keyed permutation of [low, high]: a Feistel network on HMAC-SHA256 over the
        smallest even number of bits that holds the range, walked until it lands inside."""
        span = high - low + 1
        if span < 2:
            return value
        bits = max(2, (span - 1).bit_length())
        bits += bits & 1
        half, mask = bits // 2, (1 << (bits // 2)) - 1
        label = f"{low}:{high}:".encode()
        x = value - low
        while True:
            left, right = x >> half, x & mask
            for round_ in range(4):
                digest = hmac.digest(self.key, label + bytes([round_]) + right.to_bytes(8, "big"), "sha256")
                left, right = right, left ^ (int.from_bytes(digest[:8], "big") & mask)
            x = (left << half) | right
            if x < span:
                return low + x

    def real(self, token: str, keep_length: bool = False) -> str:
        """A real again: integral if the token is (one that fits an integer becomes that
        integer's replacement, ``.0`` after it, unless ``keep_length``), else its digits
        drawn afresh with its leading zeros, last digit's zeroness and exponent kept."""
        value = float(token)
        integral = math.isfinite(value) and value.is_integer()
        if integral and abs(value) <= INT_TOP and not keep_length:
            return f"{self.integer(int(value))}.0"
        parts = REAL_PARTS.fullmatch(token)
        assert parts is not None  # the tokenizer's and NUMERIC_TEXT's numbers have this form
        digits = parts["int"] + parts["frac"]
        first = next((i for i, c in enumerate(digits) if c != "0"), len(digits))
        candidate = token
        for attempt in range(32):
            noise = self._stream(b"real" + bytes([attempt]), token.encode(), len(digits))
            new = [("0" if i < first else str(b % 10)) for i, b in enumerate(noise)]
            if first < len(digits):
                new[first] = str(1 + noise[first] % 9)
                if digits[-1] != "0" and first < len(digits) - 1:
                    new[-1] = str(1 + noise[-1] % 9)
            cut = len(parts["int"])
            candidate = "".join(new[:cut]) + parts["dot"] + "".join(new[cut:]) + (parts["exp"] or "")
            mapped = float(candidate)
            if math.isfinite(mapped) == math.isfinite(value) and (
                not math.isfinite(mapped) or mapped.is_integer() == integral
            ):
                return candidate
        return candidate


def quoted(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def negative_class(magnitude: int) -> tuple[int, int]:
    """The magnitudes of the negative integers of ``-magnitude``'s storage class."""
    low = 1
    for _, top in INT_CLASSES:
        if magnitude <= top + 1:
            return low, top + 1
        low = top + 2
    return low, INT_TOP + 1


def with_separators(token: str, digits: str) -> str:
    """``digits`` with ``token``'s ``_`` separators back in their places."""
    out, it = [], iter(digits)
    for ch in token:
        out.append("_" if ch == "_" else next(it))
    return "".join(out)


def blank_comment(text: str) -> str:
    """A comment of the same UTF-8 length whose text is spaces."""
    if text.startswith("--"):
        return "--" + " " * utf8_len(text[2:])
    closed = text.endswith("*/") and len(text) >= 4
    body = text[2:-2] if closed else text[2:]
    return "/*" + " " * utf8_len(body) + ("*/" if closed else "")


def blank_illegal(text: str) -> str:
    """A token SQLite refuses, refused still: digits become 9, any other character but
    quotes and space z (as many bytes), a blob's ``x'`` kept."""
    head = text[:2] if text[:2] in ("x'", "X'") else ""
    return head + "".join(_blank(ch) for ch in text[len(head) :])


def _blank(ch: str) -> str:
    if ch in " \t\n\r\f'\"`[]":
        return ch
    return "9" if "0" <= ch <= "9" else "z" * utf8_len(ch)
