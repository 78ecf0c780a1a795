"""The row keys SQLite chose, which a redacted log keeps so its replay picks the same rows.

An app that inserts a row without a key lets SQLite choose one (its rowid: 1, 2, 3, …,
lang_createtable.html#rowid), then names the row by it: ``UPDATE notes SET … WHERE
id = 2``. No replacement of that 2 could still name the row the replay inserted second,
so an integer that stands for a row key, no larger than the number of rows the log has
inserted so far, is kept: such a key says which row, never what the row holds. Where an
integer stands for a row key:

- compared with a rowid column (``rowid``, ``oid``, ``_rowid_``, or a column a CREATE
  TABLE of the log declared ``INTEGER PRIMARY KEY``) by ``=``, ``==``, ``!=``, ``<>``,
  ``<``, ``<=``, ``>``, ``>=``, in an ``IN (…)`` list or a ``BETWEEN … AND …``;
- given for such a column in an INSERT's ``VALUES`` (by its column list, or the table's
  columns in the order its CREATE TABLE gave).

The count is the rows of the ``VALUES`` tuples of the INSERT and REPLACE statements seen
so far (trigger steps included: they are logged too). A key first seen larger than that
count is replaced, and is so ever after (remembered), so each value gets one treatment
throughout the log."""

from __future__ import annotations

from sqlwa.record.sqltokens import Statement

ROWID_NAMES = frozenset({"rowid", "oid", "_rowid_"})
COMPARISONS = frozenset({"=", "==", "!=", "<>", "<", "<=", ">", ">="})
TABLE_CONSTRAINTS = frozenset({"CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"})
#: words that end an INSERT's VALUES tuples
AFTER_VALUES = frozenset({"ON", "RETURNING"})
#: keys remembered as replaced at most (beyond: memory kept bounded; see the module doc)
MAX_REPLACED = 1_000_000


class RowKeys:
    """What one log's statements have shown of its row keys."""

    def __init__(self) -> None:
        self.key_columns: set[str] = set(ROWID_NAMES)
        self.columns: dict[str, list[str]] = {}  # table -> its columns, in order
        self.inserted = 0
        self.replaced: set[int] = set()

    def kept(self, statement: Statement) -> set[int]:
        """The significant positions of the statement's integers that are row keys to
        keep; learns its CREATE TABLE and counts its inserted rows first."""
        words = [statement.word(j) for j in range(min(len(statement.sig), 8))]
        if words[:1] == ["CREATE"] and "TRIGGER" in words:
            return set()  # a trigger's body runs later, and is logged then
        if words[:1] == ["CREATE"] and "TABLE" in words[:4]:
            self._learn_table(statement)
        candidates = self._compared(statement) | self._inserted(statement)
        return {j for j in candidates if self._keep(statement.text(j))}

    def _keep(self, token: str) -> bool:
        if not token.isdigit() or len(token) > 19:
            return False
        value = int(token)
        if value in self.replaced:
            return False
        if value <= self.inserted:
            return True
        if len(self.replaced) < MAX_REPLACED:
            self.replaced.add(value)
        return False

    def _is_key(self, statement: Statement, j: int) -> bool:
        return statement.name(j) in self.key_columns

    # --- CREATE TABLE --------------------------------------------------------------
    def _learn_table(self, statement: Statement) -> None:
        open_at = next((j for j in range(len(statement.sig)) if statement.text(j) == "("), -1)
        close = statement.closing.get(open_at)
        if open_at < 1 or close is None or statement.word(open_at - 1) in ("AS", "SELECT"):
            return
        table = statement.name(open_at - 1)
        columns: list[str] = []
        for first, end in _elements(statement, open_at, close):
            if statement.word(first) in TABLE_CONSTRAINTS:
                self._table_key(statement, first, end, columns)
                continue
            name = statement.name(first)
            columns.append(name)
            words = [statement.word(k) for k in range(first + 1, end)]
            if words[:1] == ["INTEGER"] and "PRIMARY" in words:
                self.key_columns.add(name)
        self.columns[table] = columns

    def _table_key(self, statement: Statement, first: int, end: int, columns: list[str]) -> None:
        """PRIMARY KEY(x) as a table constraint, x declared INTEGER: x is the rowid."""
        words = [statement.word(k) for k in range(first, end)]
        if "PRIMARY" not in words:
            return
        inside = [statement.name(k) for k in range(first, end) if statement.kind(k) in ("word", "dq", "id")]
        named = [n for n in inside if n in columns]
        if len(named) == 1 and self._declared_integer(statement, named[0]):
            self.key_columns.add(named[0])

    def _declared_integer(self, statement: Statement, column: str) -> bool:
        for j in range(len(statement.sig) - 1):
            if statement.name(j) == column and statement.word(j + 1) == "INTEGER":
                return True
        return False

    # --- comparisons ---------------------------------------------------------------
    def _compared(self, statement: Statement) -> set[int]:
        found = set()
        for j in range(len(statement.sig)):
            if statement.kind(j) != "number":
                continue
            before, after = statement.text(j - 1), statement.text(j + 1)
            if (before in COMPARISONS and self._is_key(statement, j - 2)) or (
                after in COMPARISONS and self._is_key(statement, j + 2)
            ):
                found.add(j)
            elif self._in_list(statement, j) or self._between(statement, j):
                found.add(j)
        return found

    def _in_list(self, statement: Statement, j: int) -> bool:
        open_at = statement.opener[j]
        if open_at < 0 or statement.text(j - 1) not in ("(", ",") or statement.text(j + 1) not in (")", ","):
            return False
        if statement.word(open_at - 1) != "IN":
            return False
        subject = open_at - 3 if statement.word(open_at - 2) == "NOT" else open_at - 2
        return self._is_key(statement, subject)

    def _between(self, statement: Statement, j: int) -> bool:
        if statement.word(j - 1) == "BETWEEN":
            return self._is_key(statement, j - 2) or (statement.word(j - 2) == "NOT" and self._is_key(statement, j - 3))
        if statement.word(j - 1) == "AND" and statement.kind(j - 2) == "number" and statement.word(j - 3) == "BETWEEN":
            return self._between(statement, j - 2)
        return False

    # --- INSERT … VALUES -----------------------------------------------------------
    def _inserted(self, statement: Statement) -> set[int]:
        """Counts the statement's inserted rows; the positions of the keys it gives."""
        found: set[int] = set()
        j = 0
        while j < len(statement.sig):
            word = statement.word(j)
            if word in ("INSERT", "REPLACE") and statement.opener[j] < 0:
                j = self._insert(statement, j, found)
            j += 1
        return found

    def _insert(self, statement: Statement, j: int, found: set[int]) -> int:
        """One INSERT from its first word at j; returns where it ends."""
        into = next((k for k in range(j, len(statement.sig)) if statement.word(k) == "INTO"), -1)
        if into < 0:
            return j
        table_at = into + 1
        while statement.text(table_at + 1) == ".":
            table_at += 2
        table = statement.name(table_at)
        at = table_at + 1
        if statement.word(at) == "AS":
            at += 2
        columns = self.columns.get(table, [])
        if statement.text(at) == "(" and at in statement.closing:
            columns = [statement.name(first) for first, _ in _elements(statement, at, statement.closing[at])]
            at = statement.closing[at] + 1
        if statement.word(at) == "DEFAULT":
            self.inserted += 1
            return at
        if statement.word(at) != "VALUES":
            return at
        key_index = next((i for i, name in enumerate(columns) if name in self.key_columns), -1)
        at += 1
        while statement.text(at) == "(" and at in statement.closing:
            close = statement.closing[at]
            self.inserted += 1
            elements = _elements(statement, at, close)
            if 0 <= key_index < len(elements):
                first, end = elements[key_index]
                if end == first + 1 and statement.kind(first) == "number":
                    found.add(first)
            at = close + 1
            if statement.text(at) != ",":
                break
            at += 1
        return at


def _elements(statement: Statement, open_at: int, close: int) -> list[tuple[int, int]]:
    """The comma-separated elements directly inside the parentheses at open_at..close,
    each as (first significant position, position after its last)."""
    out = []
    first = open_at + 1
    for k in range(open_at + 1, close + 1):
        if k == close or (statement.text(k) == "," and statement.opener[k] == open_at):
            if k > first:
                out.append((first, k))
            first = k + 1
    return out
