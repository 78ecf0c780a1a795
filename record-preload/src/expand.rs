//! A statement's text with a bound TEXT value that holds a NUL byte, written whole.
//!
//! `sqlite3_expanded_sql` writes a bound text with `'%.*q'`, which stops at the first NUL
//! (printf.c), so `"a\0b"` comes out as `'a'`. Where the program bound such a text, this
//! walks the statement's own text as SQLite's `sqlite3VdbeExpandSql` does (vdbetrace.c:
//! the same tokens, `sqlite3GetToken`'s rules for what is a host parameter) alongside the
//! expanded text, and puts `('a'||char(0)||'b')` in that value's place — an expression of
//! the same type and bytes. Every step is checked against SQLite's own expansion (the
//! text between parameters must be the same, the value shown must be the cut text); at
//! any difference the expansion is kept as SQLite made it.

use std::collections::HashMap;

/// How a host parameter is numbered (vdbetrace.c).
#[derive(Debug, PartialEq)]
enum Numbering {
    /// `?NNN`
    Given(i64),
    /// `?`: one more than the largest so far
    Next,
    /// `:name`, `@name`, `$name`, `#name`: by `sqlite3_bind_parameter_index`
    Named,
}

/// A byte that may continue an identifier or a parameter's name (sqlite3IsIdChar).
fn is_id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\x0c' | b'\r')
}

/// The length of the token at the start of `z` (not empty) and whether it is a host
/// parameter, by the rules of tokenize.c's sqlite3GetToken (the cases that matter for
/// telling parameters apart: strings, quoted names, comments, blobs, names, numbers).
fn token(z: &[u8]) -> (usize, Option<Numbering>) {
    let at = |i: usize| z.get(i).copied().unwrap_or(0);
    let c = z[0];
    match c {
        c if is_space(c) => (z.iter().take_while(|&&b| is_space(b)).count(), None),
        b'-' if at(1) == b'-' => (2 + z[2..].iter().take_while(|&&b| b != b'\n').count(), None),
        b'/' if at(1) == b'*' => match z[2..].windows(2).position(|w| w == b"*/") {
            Some(end) => (end + 4, None),
            None => (z.len(), None),
        },
        b'\'' | b'"' | b'`' => (quoted(z, c), None),
        b'[' => (
            z.iter().position(|&b| b == b']').map_or(z.len(), |i| i + 1),
            None,
        ),
        b'?' => {
            let digits = z[1..].iter().take_while(|b| b.is_ascii_digit()).count();
            let number = std::str::from_utf8(&z[1..1 + digits])
                .ok()
                .and_then(|d| d.parse().ok());
            match (digits, number) {
                (0, _) => (1, Some(Numbering::Next)),
                (_, Some(n)) => (1 + digits, Some(Numbering::Given(n))),
                (_, None) => (1 + digits, None),
            }
        }
        b'$' | b'@' | b':' | b'#' => named_parameter(z),
        b'x' | b'X' if at(1) == b'\'' => (
            2 + z[2..]
                .iter()
                .position(|&b| b == b'\'')
                .map_or(z.len() - 2, |i| i + 1),
            None,
        ),
        b'0'..=b'9' | b'.' if c != b'.' || at(1).is_ascii_digit() => (number(z), None),
        c if is_id_char(c) => (z.iter().take_while(|&&b| is_id_char(b)).count(), None),
        _ => (1, None),
    }
}

/// A quoted string or name: up to its closing quote, a doubled quote inside it.
fn quoted(z: &[u8], quote: u8) -> usize {
    let mut i = 1;
    while i < z.len() {
        if z[i] == quote {
            if z.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    z.len()
}

/// A number, with what SQLite takes into the same token (letters after it make it an
/// illegal token, still one token).
fn number(z: &[u8]) -> usize {
    let mut i = 0;
    while i < z.len() {
        let b = z[i];
        let exponent_sign = (b == b'+' || b == b'-')
            && i > 0
            && matches!(z[i - 1], b'e' | b'E')
            && !z[..i].starts_with(b"0x")
            && !z[..i].starts_with(b"0X");
        if is_id_char(b) || b == b'.' || exponent_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// `:name` and its kin, with Tcl's `::` and `(…)` suffixes (tokenize.c, CC_VARALPHA).
fn named_parameter(z: &[u8]) -> (usize, Option<Numbering>) {
    let (mut i, mut n) = (1, 0);
    while i < z.len() {
        let c = z[i];
        if is_id_char(c) {
            n += 1;
        } else if c == b'(' && n > 0 {
            loop {
                i += 1;
                if i >= z.len() || is_space(z[i]) || z[i] == b')' {
                    break;
                }
            }
            return if z.get(i) == Some(&b')') {
                (i + 1, Some(Numbering::Named))
            } else {
                (i, None)
            };
        } else if c == b':' && z.get(i + 1) == Some(&b':') {
            i += 1;
        } else {
            break;
        }
        i += 1;
    }
    (i, (n > 0).then_some(Numbering::Named))
}

/// The end of the value `sqlite3VdbeExpandSql` wrote at `e[0..]`: NULL, a number, a
/// quoted text, a blob `x'…'` or `zeroblob(N)`.
fn value_end(e: &[u8]) -> Option<usize> {
    match e.first()? {
        b'\'' => Some(quoted(e, b'\'')).filter(|&n| n > 1 && e[n - 1] == b'\''),
        _ if e.starts_with(b"x'") => Some(2 + e[2..].iter().position(|&b| b == b'\'')? + 1),
        _ if e.starts_with(b"zeroblob(") => Some(e.iter().position(|&b| b == b')')? + 1),
        _ => {
            let n = e
                .iter()
                .take_while(|&&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
                .count();
            (n > 0).then_some(n)
        }
    }
}

/// A text as SQLite's expansion shows it: quoted, quotes doubled, cut at a NUL.
fn as_expanded(text: &[u8]) -> Vec<u8> {
    let cut = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    quote(&text[..cut])
}

fn quote(text: &[u8]) -> Vec<u8> {
    let mut out = vec![b'\''];
    for &b in text {
        if b == b'\'' {
            out.push(b'\'');
        }
        out.push(b);
    }
    out.push(b'\'');
    out
}

/// A text with NULs as an SQL expression of the same TEXT: `('a'||char(0)||'b')`.
pub fn whole(text: &[u8]) -> Vec<u8> {
    let mut out = vec![b'('];
    for (i, piece) in text.split(|&b| b == 0).enumerate() {
        if i > 0 {
            out.extend_from_slice(b"||char(0)||");
        }
        out.extend_from_slice(&quote(piece));
    }
    out.push(b')');
    out
}

/// `expanded` (SQLite's expansion of the statement `raw`) with each bound text of `nul`
/// (parameter number -> the whole text) written whole; `index_of` numbers a named
/// parameter as `sqlite3_bind_parameter_index` does. None where the walk does not match
/// SQLite's expansion (keep that one then).
pub fn with_whole_texts(
    raw: &[u8],
    expanded: &[u8],
    nul: &HashMap<i32, Vec<u8>>,
    index_of: impl Fn(&[u8]) -> i32,
) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(expanded.len() + 32);
    // r: where the walk is in `raw`; copied: how far `raw` is in `out`; e: the same in `expanded`
    let (mut r, mut copied, mut e, mut next) = (0, 0, 0, 1i64);
    let mut changed = false;
    while r < raw.len() {
        let (len, numbering) = token(&raw[r..]);
        let Some(numbering) = numbering else {
            r += len;
            continue;
        };
        let idx = match numbering {
            Numbering::Given(n) => n,
            Numbering::Next => next,
            Numbering::Named => i64::from(index_of(&raw[r..r + len])),
        };
        if idx <= 0 {
            return None;
        }
        next = next.max(idx + 1);
        // the text up to this parameter, as SQLite copied it
        let before = &raw[copied..r];
        if !expanded[e..].starts_with(before) {
            return None;
        }
        out.extend_from_slice(before);
        e += before.len();
        let shown = &expanded[e..e + value_end(&expanded[e..])?];
        match i32::try_from(idx).ok().and_then(|i| nul.get(&i)) {
            Some(text) if shown == as_expanded(text).as_slice() => {
                out.extend_from_slice(&whole(text));
                changed = true;
            }
            _ => out.extend_from_slice(shown),
        }
        e += shown.len();
        r += len;
        copied = r;
    }
    if expanded[e..] != raw[copied..] {
        return None;
    }
    out.extend_from_slice(&raw[copied..]);
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nul(pairs: &[(i32, &[u8])]) -> HashMap<i32, Vec<u8>> {
        pairs.iter().map(|(i, t)| (*i, t.to_vec())).collect()
    }

    #[test]
    fn a_text_with_a_nul_is_written_whole() {
        let got = with_whole_texts(
            b"INSERT INTO t VALUES (?, ?, ?)",
            b"INSERT INTO t VALUES ('a', 'it''s', 7)",
            &nul(&[(1, b"a\0b"), (2, b"it's\0\0 two\0")]),
            |_| 0,
        );
        assert_eq!(
            String::from_utf8(got.unwrap()).unwrap(),
            "INSERT INTO t VALUES (('a'||char(0)||'b'), ('it''s'||char(0)||''||char(0)||' two'||char(0)||''), 7)"
        );
    }

    #[test]
    fn parameters_in_strings_and_comments_are_not_parameters() {
        let raw = b"UPDATE t SET v = v || '?', n = n + 1 -- ? :x\n WHERE k = ?1 AND ?1 IS NOT NULL /* ?2 */";
        let expanded = b"UPDATE t SET v = v || '?', n = n + 1 -- ? :x\n WHERE k = 'a' AND 'a' IS NOT NULL /* ?2 */";
        let got = with_whole_texts(raw, expanded, &nul(&[(1, b"a\0b")]), |_| 0).unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            "UPDATE t SET v = v || '?', n = n + 1 -- ? :x\n WHERE k = ('a'||char(0)||'b') AND ('a'||char(0)||'b') IS NOT NULL /* ?2 */"
        );
    }

    #[test]
    fn named_parameters_are_numbered_by_sqlite() {
        let raw = b"INSERT INTO t VALUES (:k, $v::x(1), @w, ?)";
        let expanded = b"INSERT INTO t VALUES ('', NULL, x'00ff', 'z')";
        let index = |name: &[u8]| match name {
            b":k" => 1,
            b"$v::x(1)" => 2,
            b"@w" => 3,
            _ => 0,
        };
        let got = with_whole_texts(raw, expanded, &nul(&[(1, b"\0lead"), (4, b"z\0")]), index);
        assert_eq!(
            String::from_utf8(got.unwrap()).unwrap(),
            "INSERT INTO t VALUES ((''||char(0)||'lead'), NULL, x'00ff', ('z'||char(0)||''))"
        );
    }

    #[test]
    fn a_value_that_is_not_the_cut_text_is_left_as_sqlite_wrote_it() {
        // the parameter was bound again (an integer now): the text seen is not ours
        let got = with_whole_texts(b"SELECT ?", b"SELECT 5", &nul(&[(1, b"a\0b")]), |_| 0);
        assert_eq!(got, None);
        // a nested statement's expansion ("-- " lines) does not match the raw text
        let got = with_whole_texts(b"SELECT ?", b"-- SELECT 'a'", &nul(&[(1, b"a\0b")]), |_| 0);
        assert_eq!(got, None);
    }

    #[test]
    fn numbers_names_and_blobs_are_single_tokens() {
        assert_eq!(token(b"1e+5?").0, 4);
        assert_eq!(token(b"0x1e+5").0, 4);
        assert_eq!(token(b"a$b?").0, 3);
        assert_eq!(token(b"x'00?'").0, 6);
        assert_eq!(token(b"[a?b] ?").0, 5);
        assert_eq!(token(b"\"a\"\"?\" ?").0, 6);
        assert_eq!(token(b"?12,").1, Some(Numbering::Given(12)));
        assert_eq!(token(b": x").1, None);
    }
}
