//! Byte-level reading for the fast path: eight bytes at a time where a line has them.
use crate::text::{bytes_equal, is_blank, scan};

/// The first eight bytes of `s` as a word, first byte lowest.
#[inline(always)]
pub(super) fn load(s: &[u8]) -> u64 {
    u64::from_le_bytes(s[..8].try_into().expect("eight bytes"))
}

/// The first `byte` in `s`: `memchr` costs more in its setup than in its search on the few
/// dozen bytes this looks through.
#[inline(always)]
pub(super) fn find_byte(s: &[u8], byte: u8) -> Option<usize> {
    let at = scan(s, 0, |w| bytes_equal(w, byte), |c| c == byte);
    (at < s.len()).then_some(at)
}

/// `end` moved back over the ASCII whitespace before it, but not before `start`; runs of
/// spaces (the padding after `comm-pid`) eight at a time.
#[inline(always)]
pub(super) fn skip_back_whitespace(line: &[u8], start: usize, mut end: usize) -> usize {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const SPACES: u64 = 0x2020_2020_2020_2020;
    while end >= start + 8 {
        let w = u64::from_le_bytes(line[end - 8..end].try_into().expect("eight bytes")) ^ SPACES;
        // High bit of each byte that is not a space, exactly.
        let not_space = (((w & LOW7) + LOW7) | w) & !LOW7;
        if not_space == 0 {
            end -= 8;
            continue;
        }
        end -= (not_space.leading_zeros() / 8) as usize;
        break;
    }
    while end > start && line[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    end
}

/// Digits from `*p` up to a blank or the end (at most 19, so no overflow) → the value,
/// with `*p` after them; `None` for anything else.
#[inline(always)]
pub(super) fn number_word(s: &[u8], p: &mut usize) -> Option<u64> {
    let (v, n) = digits(s, p);
    (n > 0 && n <= 19 && s.get(*p).is_none_or(|&c| is_blank(c))).then_some(v)
}

/// The run of digits at `*p` → (value, how many), `*p` after them. The value wraps past
/// 19 digits; callers bound the count. Eight bytes at a time where the line has them.
#[inline(always)]
pub(super) fn digits(s: &[u8], p: &mut usize) -> (u64, usize) {
    const POW10: [u64; 9] = [
        1,
        10,
        100,
        1_000,
        10_000,
        100_000,
        1_000_000,
        10_000_000,
        100_000_000,
    ];
    let start = *p;
    // Most numbers end within their first eight bytes: no loop, no scaling.
    if let Some(chunk) = s.get(start..start + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let n = leading_digits(w);
        if n < 8 {
            *p += n;
            return (
                if n == 0 {
                    0
                } else {
                    eight_digits(w << (8 * (8 - n)))
                },
                n,
            );
        }
    }
    let mut v = 0u64;
    while let Some(chunk) = s.get(*p..*p + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let n = leading_digits(w);
        if n > 0 {
            v = v
                .wrapping_mul(POW10[n])
                .wrapping_add(eight_digits(w << (8 * (8 - n))));
            *p += n;
        }
        if n < 8 {
            return (v, *p - start);
        }
    }
    while let Some(&c) = s.get(*p) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v.wrapping_mul(10).wrapping_add(d as u64);
        *p += 1;
    }
    (v, *p - start)
}

/// How many of the eight bytes of `w` (first byte lowest) lead with ASCII digits.
#[inline(always)]
fn leading_digits(w: u64) -> usize {
    const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    // A byte is a digit iff its high nibble is 3 and adding 6 keeps it 3. Carries out of
    // a non-digit byte reach only later bytes, past the first non-digit.
    let bad = ((w & HIGH) ^ THREES) | ((w.wrapping_add(0x0606_0606_0606_0606) & HIGH) ^ THREES);
    (bad.trailing_zeros() / 8) as usize
}

/// The value of eight ASCII digits (first byte lowest; zero bytes count as leading zeros).
#[inline(always)]
fn eight_digits(w: u64) -> u64 {
    let w = (w & 0x0F0F_0F0F_0F0F_0F0F).wrapping_mul(2561) >> 8;
    let w = (w & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601) >> 16;
    (w & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digit_runs_read_eight_at_a_time_as_one_at_a_time() {
        let mut cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"0".to_vec(),
            b"12345678".to_vec(),
            b"123456789 x".to_vec(),
        ];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 24) as usize;
            let line: Vec<u8> = (0..len)
                .map(|k| {
                    let r = (x >> (k % 8 * 8)) as u8 ^ k as u8;
                    if r % 5 == 0 {
                        b"/:. \xff\x00\x2f\x3a"[(r / 5 % 8) as usize]
                    } else {
                        b'0' + r % 10
                    }
                })
                .collect();
            cases.push(line);
        }
        for line in cases {
            for start in 0..=line.len() {
                let mut p = start;
                let (v, n) = digits(&line, &mut p);
                let run = line[start..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .count();
                let want = line[start..start + run].iter().fold(0u64, |v, &c| {
                    v.wrapping_mul(10).wrapping_add((c - b'0') as u64)
                });
                assert_eq!(
                    (v, n, p),
                    (want, run, start + run),
                    "{:?} at {start}",
                    String::from_utf8_lossy(&line)
                );
            }
        }
    }

    #[test]
    fn whitespace_is_skipped_back_as_one_byte_at_a_time() {
        for line in [
            &b"x-1            [0]"[..],
            b"x-1 \t \r  \x0c        [0]",
            b"        [",
            b"a[",
            b"ab                 ",
        ] {
            for start in 0..line.len() {
                for end in start..=line.len() {
                    let mut want = end;
                    while want > start && line[want - 1].is_ascii_whitespace() {
                        want -= 1;
                    }
                    assert_eq!(
                        skip_back_whitespace(line, start, end),
                        want,
                        "{line:?} {start}..{end}"
                    );
                }
            }
        }
    }
}
