//! Block tracepoints (`block_rq_issue: 259,0 WS 4096 () 8 + 8 be,0,4 [sqlite3]`) and `blk`
//! tracer lines (`8,0 D W 1234 + 8 [kworker/0:1]`): the usual shape on the fast path
//! (`fast_block`), anything else through the body grammar blkparse shares.
use super::header::Header;
use super::push_text_row;
use super::scan::{digits, number_word};
use crate::blkparse_text::push_block_event;
use crate::intern::Decoded;
use crate::rwbs::{parse_rwbs, sized_operation};
use crate::table::{Action, Event, Operation, RecordKind, RowWriter};
use crate::text::{is_blank, parse_dev, parse_i64, request_bytes, skip_blanks, word_end, Cursor};

/// The blanks between two fields of a block body: with `SINGLE`, one space or the end of
/// the line (how the kernel prints them; the next field's own parse rejects a second
/// blank), otherwise any run of blanks, none included.
#[inline(always)]
fn gap<const SINGLE: bool>(s: &[u8], p: &mut usize) -> Option<()> {
    if !SINGLE {
        skip_blanks(s, p);
        return Some(());
    }
    match s.get(*p) {
        None => Some(()),
        Some(b' ') => {
            *p += 1;
            Some(())
        }
        Some(_) => None,
    }
}

/// The fields of a block tracepoint's body of the usual shape.
pub(super) struct BlockBody<'a> {
    dev: (u32, u32),
    rwbs: &'a [u8],
    bytes: Option<u64>,
    sector: u64,
    sectors: u32,
    /// The `[...]` group ending the line, without its brackets.
    bracket: Option<&'a [u8]>,
}

/// `maj,min RWBS [bytes ()] sector + n [ioprio] [[comm]]`, fields apart by the kernel's
/// single spaces (`SINGLE`) or by any runs of blanks; `None` for any other shape.
#[inline(always)]
pub(super) fn block_body<const SINGLE: bool>(b: &[u8]) -> Option<BlockBody<'_>> {
    let mut p = 0;
    let dev = device(b, &mut p)?;
    gap::<SINGLE>(b, &mut p)?;
    let rwbs_start = p;
    p = word_end(b, p);
    let rwbs = &b[rwbs_start..p];
    gap::<SINGLE>(b, &mut p)?;
    let (bytes, sector, sectors) = extent::<SINGLE>(b, &mut p)?;
    gap::<SINGLE>(b, &mut p)?;
    let bracket = ioprio_and_bracket::<SINGLE>(b, p)?;
    Some(BlockBody {
        dev,
        rwbs,
        bytes,
        sector,
        sectors,
        bracket,
    })
}

/// `maj,min` and the blank after it at `*p` → (major, minor), `*p` at the blank.
#[inline(always)]
fn device(b: &[u8], p: &mut usize) -> Option<(u32, u32)> {
    let (maj, n) = digits(b, p);
    if n == 0 || n > 9 || b.get(*p) != Some(&b',') {
        return None;
    }
    *p += 1;
    let (min, n) = digits(b, p);
    if n == 0 || n > 9 || !b.get(*p).is_some_and(|&c| is_blank(c)) {
        return None;
    }
    Some((maj as u32, min as u32))
}

/// `[bytes ]()`, then `sector + n` at `*p` → (bytes, sector, sectors), `*p` after them.
#[inline(always)]
fn extent<const SINGLE: bool>(b: &[u8], p: &mut usize) -> Option<(Option<u64>, u64, u32)> {
    let mut bytes = None;
    let mut first = None;
    if b.get(*p).is_some_and(u8::is_ascii_digit) {
        first = Some(number_word(b, p)?);
        gap::<SINGLE>(b, p)?;
    }
    if b.get(*p) == Some(&b'(') {
        bytes = first.take();
        // Usually `()`: no search needed.
        let close = if b.get(*p + 1) == Some(&b')') {
            1
        } else {
            memchr::memchr(b')', &b[*p..])?
        };
        *p += close + 1;
        gap::<SINGLE>(b, p)?;
        if !b.get(*p).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        first = Some(number_word(b, p)?);
        gap::<SINGLE>(b, p)?;
    }
    let sector = first?;
    if b.get(*p) != Some(&b'+') {
        return None;
    }
    *p += 1;
    gap::<SINGLE>(b, p)?;
    let sectors = u32::try_from(number_word(b, p)?).ok()?;
    Some((bytes, sector, sectors))
}

/// An optional ioprio word (`be,0,4`), then an optional `[...]` group ending the line, at
/// `p` → the group without its brackets; `None` for anything else.
#[inline(always)]
fn ioprio_and_bracket<const SINGLE: bool>(b: &[u8], mut p: usize) -> Option<Option<&[u8]>> {
    if b.get(p).is_some_and(|&c| !matches!(c, b'[' | b'(' | b'<')) {
        let w = p;
        p = word_end(b, p);
        // A short word: a plain loop, not the memchr call `contains` makes.
        #[allow(clippy::manual_contains)]
        let has_comma = b[w..p].iter().any(|&c| c == b',');
        if !has_comma {
            return None;
        }
        gap::<SINGLE>(b, &mut p)?;
    }
    if p >= b.len() {
        return Some(None);
    }
    if b[p] != b'[' || b[b.len() - 1] != b']' || b.len() - 1 <= p {
        return None;
    }
    Some(Some(&b[p + 1..b.len() - 1]))
}

/// A block tracepoint whose body has the usual shape (`block_body`), pushed as
/// `push_block_tracepoint` would push it. `false` (and nothing pushed or interned) for any
/// other event or shape.
#[inline]
pub(super) fn fast_block(
    table: &mut RowWriter<'_>,
    rwbs_decoded: &mut Decoded<(Operation, u16)>,
    h: &Header<'_>,
    action: Action,
    name: &[u8],
    body: &[u8],
) -> bool {
    if matches!(action, Action::Plug | Action::Unplug | Action::OtherBlock) {
        return false;
    }
    // The kernel's single spaces first: fewer checks than runs of blanks.
    let Some(BlockBody {
        dev: (maj, min),
        rwbs,
        bytes,
        sector,
        sectors,
        bracket,
    }) = block_body::<true>(body).or_else(|| block_body::<false>(body))
    else {
        return false;
    };
    let rwbs_code = table.rwbs_values().code(rwbs);
    let Some((operation, flags)) = rwbs_decoded.get(rwbs_code, rwbs, parse_rwbs) else {
        return false;
    };
    let Some((error, comm)) = error_or_comm(action, bracket, h.comm) else {
        return false;
    };
    let bytes = request_bytes(bytes, sectors);
    let e = Event {
        dev_major: maj,
        dev_minor: min,
        action,
        operation: sized_operation(operation, flags, bytes),
        flags,
        sector,
        sectors,
        bytes,
        error,
        ..h.event(RecordKind::Block)
    };
    // Interned in the general path's order: name, process name, RWBS.
    let name_code = table.names().intern(name);
    let comm_code = table.comms().intern(comm);
    let rwbs_code = rwbs_code.unwrap_or_else(|| table.rwbs_values().intern(rwbs));
    table.push(&e, comm_code, rwbs_code, name_code, b"");
    true
}

/// A block tracepoint of any shape: `event: body` with the event's action.
pub(super) fn push_block_tracepoint(
    table: &mut RowWriter<'_>,
    mut e: Event,
    action: Action,
    name: &[u8],
    body: &[u8],
    comm: &[u8],
) -> Result<(), &'static str> {
    let name_code = table.names().intern(name);
    // block_plug / block_unplug print no device and no RWBS.
    if matches!(action, Action::Plug | Action::Unplug) {
        return push_block_event(table, e, action, b"N", body, comm, name_code);
    }
    let mut c = Cursor::new(body);
    let (maj, min) = c.word().and_then(parse_dev).ok_or("bad device")?;
    e.dev_major = maj;
    e.dev_minor = min;
    if action == Action::OtherBlock {
        // block_dirty_buffer, block_io_start …: keep the body text, interpret what fits.
        let rest = c.rest();
        let mut probe = Cursor::new(rest);
        if let Some(rwbs) = probe.word() {
            if push_block_event(
                table,
                e.clone(),
                action,
                rwbs,
                probe.rest(),
                comm,
                name_code,
            )
            .is_ok()
            {
                return Ok(());
            }
        }
        e.kind = RecordKind::Block;
        e.action = action;
        push_text_row(table, &e, comm, name, body);
        return Ok(());
    }
    let rwbs = c.word().ok_or("missing RWBS")?;
    push_block_event(table, e, action, rwbs, c.rest(), comm, name_code)
}

/// What a block body's `[...]` group says: the error code of a completion or requeue
/// (`[0]`, `[-5]`), the process name for any other action (else `comm`). `None` for an
/// error code that is not an i32.
#[inline(always)]
fn error_or_comm<'a>(
    action: Action,
    bracket: Option<&'a [u8]>,
    comm: &'a [u8],
) -> Option<(i32, &'a [u8])> {
    match bracket {
        Some(g) if matches!(action, Action::Complete | Action::Requeue) => {
            // Nearly always `[0]`.
            let error = if g == b"0" {
                0
            } else {
                i32::try_from(parse_i64(g)?).ok()?
            };
            Some((error, comm))
        }
        Some(g) => Some((0, g)),
        None => Some((0, comm)),
    }
}

/// The `blk` tracer: `maj,min [cgroup] action rwbs body`.
pub(super) fn push_blk_tracer_line(
    table: &mut RowWriter<'_>,
    mut e: Event,
    rest: &[u8],
    comm: &[u8],
) -> Result<(), &'static str> {
    let mut c = Cursor::new(rest);
    let (maj, min) = c
        .word()
        .and_then(parse_dev)
        .ok_or("neither an event name nor a blk tracer device")?;
    e.dev_major = maj;
    e.dev_minor = min;
    let mut letters = c.word().ok_or("missing action")?;
    if letters.contains(&b',') {
        // cgroup id `ino,gen` in hex.
        letters = c.word().ok_or("missing action")?;
    }
    let action = Action::from_letters(letters).ok_or("unknown blk action")?;
    let rwbs = c.word().ok_or("missing RWBS")?;
    push_block_event(table, e, action, rwbs, c.rest(), comm, 0)
}
