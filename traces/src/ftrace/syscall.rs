//! Syscall lines: the tracepoints' own format (`sys_enter_fsync: fd: 0x3`,
//! `sys_exit_fsync: 0x0`) and the syscall events' print format (`sys_fsync(fd: 3)`,
//! `sys_fsync -> 0x0`). Either way the row is named after the syscall and keeps the
//! arguments or the return value as its text.
use crate::table::{Event, RecordKind};
use crate::text::parse_hex;

/// A syscall tracepoint's name, `sys_enter_NAME` or `sys_exit_NAME` → the row's kind
/// and the syscall's name; `None` for any other event name.
pub(super) fn syscall_tracepoint(name: &[u8]) -> Option<(RecordKind, &[u8])> {
    if let Some(syscall) = name.strip_prefix(b"sys_enter_") {
        Some((RecordKind::SyscallEnter, syscall))
    } else {
        Some((RecordKind::SyscallExit, name.strip_prefix(b"sys_exit_")?))
    }
}

/// What a row of `e.kind` says in its text: a syscall entry's arguments, a syscall exit's
/// return value; nothing for other kinds.
pub(super) fn read_syscall_text(e: &mut Event, text: &[u8]) -> Result<(), &'static str> {
    match e.kind {
        RecordKind::SyscallEnter => parse_syscall_args(e, text),
        RecordKind::SyscallExit => {
            let ret = parse_number(text.trim_ascii()).ok_or("bad syscall return value")?;
            e.ret = Some(ret as i64);
        }
        _ => {}
    }
    Ok(())
}

/// The syscall events' print format: `sys_write(fd: 3, buf: 0x7f…, count: 0x28)` on
/// entry and `sys_write -> 0x28` on exit → the syscall's name and the row's text, with the
/// kind, arguments and return value set in `e`. `Ok(None)`, with `e` untouched, if `rest`
/// is not in that form.
pub(super) fn syscall_print_format<'a>(
    e: &mut Event,
    rest: &'a [u8],
) -> Result<Option<SyscallText<'a>>, &'static str> {
    let name_end = rest
        .iter()
        .position(|&b| b == b'(' || b == b' ' || b == b':')
        .unwrap_or(rest.len());
    let name = &rest[4..name_end];
    let (kind, body) = if rest.get(name_end) == Some(&b'(') {
        let args = &rest[name_end + 1..];
        let args = args
            .strip_suffix(b")")
            .ok_or("unclosed syscall argument list")?;
        (RecordKind::SyscallEnter, args)
    } else if let Some(ret) = rest[name_end..].strip_prefix(b" -> ") {
        (RecordKind::SyscallExit, ret.trim_ascii())
    } else {
        return Ok(None);
    };
    e.kind = kind;
    read_syscall_text(e, body)?;
    Ok(Some(SyscallText { name, body }))
}

/// A syscall line's name (without `sys_`) and the row's text.
pub(super) struct SyscallText<'a> {
    pub name: &'a [u8],
    pub body: &'a [u8],
}

/// A syscall argument or return value as the kernel prints it: always hex. Kernels up
/// to 6.x print arguments as bare hex (`count: 1000` for 4096: `"%s: %lx"`); newer ones
/// print `0x1000`, and a bare number only below 10, where hex and decimal agree.
fn parse_number(s: &[u8]) -> Option<u64> {
    parse_hex(s)
}

/// `fd: 0x00000003, buf: 0x…, count: 0x00001000` → fd and count (into `aux`).
fn parse_syscall_args(e: &mut Event, body: &[u8]) {
    for arg in body.split(|&b| b == b',') {
        let Some(colon) = memchr::memchr(b':', arg) else {
            continue;
        };
        let key = arg[..colon].trim_ascii();
        let Some(value) = parse_number(arg[colon + 1..].trim_ascii()) else {
            continue;
        };
        match key {
            b"fd" => e.fd = Some(value as u32 as i32 as i64),
            b"count" | b"nbytes" | b"len" | b"length" => e.aux = value,
            _ => {}
        }
    }
}
