"""``--redact``: a log's literal values replaced with made-up ones that SQLite stores in
the same number of bytes, so a replay writes what the app wrote, size for size, without
the app's data.

- a string: the same number of UTF-8 bytes (ASCII letters and digits; one of digits only
  stays digits only, as SQLite may store it in an INTEGER column as a number);
- a blob ``X'…'``: the same number of bytes;
- an integer: one of the same record size class (SQLite stores 0 and 1 in no bytes, then
  1, 2, 3, 4, 6 or 8 bytes by magnitude: fileformat2.html, "Record Format"), by a
  permutation of that class's values, so distinct keys stay distinct;
- a real: a real again (an integral one stays integral, of the same class: SQLite stores
  those in REAL columns as integers).

Numbers that choose rows or sizes are kept: those after WHERE, ON, HAVING, LIMIT or
OFFSET (an app's ``UPDATE … WHERE id = 2`` names a row whose key the database assigned,
so no replacement could still find it) and those given to a function (``zeroblob(300)``
sets a size). Strings there are replaced all the same: an app's strings come from its
own literals, which get the same replacement.

The same literal gets the same replacement throughout a log (a row inserted and later
updated by its key still matches), under a key drawn afresh for each log. Schema and
setting statements (CREATE, ALTER, DROP, PRAGMA, ATTACH, DETACH) are kept as written:
they hold the app's structure, not its users' data, and the replay needs them exact.
Strings passed to functions are literals too and are replaced (a JSON path or a date
format then means something else; the sizes stay)."""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re

KEPT_STATEMENTS = frozenset({"CREATE", "ALTER", "DROP", "PRAGMA", "ATTACH", "DETACH"})
#: SQLite's integer storage classes: bytes of the record field, and the largest value
INT_CLASSES = ((1, 2**7 - 1), (2, 2**15 - 1), (3, 2**23 - 1), (4, 2**31 - 1), (6, 2**47 - 1), (8, 2**63 - 1))
ALPHABET = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: Words after which a statement's numbers choose rows, not store values
ROW_CHOOSERS = frozenset({"WHERE", "ON", "HAVING", "LIMIT", "OFFSET"})
#: Words a "(" can follow that do not make it a function call
NOT_FUNCTIONS = frozenset(
    "VALUES IN AND OR NOT WHEN THEN ELSE SELECT SET BY EXISTS AS FROM WHERE ON IS LIKE GLOB BETWEEN CASE "
    "RETURNING INTO TABLE USING".split()
)
FIRST_WORD = re.compile(r"\s*(?:(?:--[^\n]*\n|/\*.*?\*/)\s*)*([A-Za-z]+)", re.DOTALL)


def is_ident_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_$" or ord(ch) > 127


class Redactor:
    """Replaces the literals of SQL statements; one instance per log (one key)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = os.urandom(32) if key is None else key
        self.int_maps = {size: self._permutation(size, top) for size, top in INT_CLASSES}

    def redact(self, sql: str) -> str:
        """``sql`` with its literals replaced (kept whole for schema and setting statements)."""
        first = FIRST_WORD.match(sql)
        if first is None or first.group(1).upper() in KEPT_STATEMENTS:
            return sql
        out: list[str] = []
        i, n = 0, len(sql)
        choosing_rows = False
        calls: list[bool] = []  # per open "(": whether it is a function call's
        word = ""  # the last word, for telling a call's "(" from others
        while i < n:
            end, replacement = self._token(sql, i)
            token = sql[i:end]
            if replacement is not None and token[0] not in "'xX" and (choosing_rows or any(calls)):
                replacement = None  # a number that picks rows or sets a size
            out.append(token if replacement is None else replacement)
            if is_ident_char(token[0]) and not token[0].isdigit():
                word = token.upper()
                choosing_rows = choosing_rows or word in ROW_CHOOSERS
            elif token == "(":
                calls.append(bool(word) and word not in NOT_FUNCTIONS)
                word = ""
            elif token == ")" and calls:
                calls.pop()
            elif not token.isspace():
                word = ""
            i = end
        return "".join(out)

    def _token(self, sql: str, i: int) -> tuple[int, str | None]:
        """The end of the token at ``i`` and its replacement (None: kept as written)."""
        ch, nxt = sql[i], sql[i + 1 : i + 2]
        after_ident = i > 0 and is_ident_char(sql[i - 1])
        if ch == "'":
            end = quoted_end(sql, i, "'")
            return end, "'" + self.string(sql[i + 1 : end - 1].replace("''", "'")) + "'"
        if ch in "xX" and nxt == "'" and not after_ident:
            end = quoted_end(sql, i + 1, "'")
            return end, ch + "'" + self.blob_hex(sql[i + 2 : end - 1]) + "'"
        if ch in '"`':
            return quoted_end(sql, i, ch), None
        if ch == "[":
            close = sql.find("]", i)
            return (len(sql) if close < 0 else close + 1), None
        if sql.startswith("--", i):
            close = sql.find("\n", i)
            return (len(sql) if close < 0 else close + 1), None
        if sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            return (len(sql) if close < 0 else close + 2), None
        if (ch.isdigit() or (ch == "." and nxt.isdigit())) and not after_ident:
            match = NUMBER.match(sql, i)
            assert match is not None
            return match.end(), self.number(match.group())
        if is_ident_char(ch) or ch == "?":
            end = i + 1
            while end < len(sql) and is_ident_char(sql[end]):
                end += 1
            return end, None
        return i + 1, None

    def _stream(self, label: bytes, value: bytes, size: int) -> bytes:
        """``size`` pseudo-random bytes, the same for the same label and value."""
        out = b""
        counter = 0
        while len(out) < size:
            out += hmac.new(self.key, label + counter.to_bytes(4, "big") + value, hashlib.sha256).digest()
            counter += 1
        return out[:size]

    def string(self, text: str) -> str:
        """A string of the same UTF-8 byte length (digits for digits where all are digits)."""
        raw = text.encode("utf-8", "surrogateescape")
        noise = self._stream(b"str", raw, len(raw))
        if raw and raw.isdigit():
            digits = [chr(ord("0") + b % 10) for b in noise]
            if len(digits) > 1 and raw[:1] != b"0":
                digits[0] = chr(ord("1") + noise[0] % 9)  # keeps its magnitude: no leading 0
            return "".join(digits)
        return bytes(ALPHABET[b % len(ALPHABET)] for b in noise).decode()

    def blob_hex(self, hex_digits: str) -> str:
        return self._stream(b"blob", hex_digits.lower().encode(), len(hex_digits) // 2).hex()

    def number(self, token: str) -> str:
        """An integer of the same storage class, or a real (integral if it was)."""
        if token[:2].lower() == "0x":
            value = int(token, 16)
            return str(self.integer(value)) if value <= INT_CLASSES[-1][1] else token
        if "." not in token and "e" not in token.lower():
            value = int(token)
            return str(self.integer(value)) if value <= INT_CLASSES[-1][1] else token
        real = float(token)
        if real.is_integer() and abs(real) <= 2**53:
            return f"{self.integer(int(real))}.0"
        fraction = int.from_bytes(self._stream(b"real", token.encode(), 6), "big")
        return repr(fraction / 1024 + 0.5 / 1024)  # never integral

    def integer(self, value: int) -> int:
        """``value`` (≥ 0) permuted within its storage class; 0 and 1 stay (no bytes)."""
        if value <= 1:
            return value
        size = next(size for size, top in INT_CLASSES if value <= top)
        low, span, mult, shift = self.int_maps[size]
        return low + ((value - low) * mult + shift) % span

    def _permutation(self, size: int, top: int) -> tuple[int, int, int, int]:
        """An affine permutation of the class's positive values: (low, span, mult, shift)."""
        smaller = [t for s, t in INT_CLASSES if s < size]
        low = smaller[-1] + 1 if smaller else 2
        span = top - low + 1
        noise = self._stream(b"int", bytes([size]), 16)
        mult = int.from_bytes(noise[:8], "big") | 1
        while math.gcd(mult, span) != 1:
            mult += 2
        return low, span, mult, int.from_bytes(noise[8:], "big") % span


def quoted_end(sql: str, i: int, quote: str) -> int:
    """The end (exclusive) of the quoted token at ``i`` (a doubled quote is one quote)."""
    j = i + 1
    while True:
        close = sql.find(quote, j)
        if close < 0:
            return len(sql)
        if sql.startswith(quote * 2, close):
            j = close + 2
            continue
        return close + 1
