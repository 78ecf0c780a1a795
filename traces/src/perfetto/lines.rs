//! Each ftrace event as the line the kernel's text output prints for it, so the one
//! ftrace reader gives it meaning (RWBS, flags, bytes, syscall arguments) exactly as for
//! a tracefs capture. The task's name is a placeholder the reader replaces by pid.
use std::collections::HashMap;
use std::io::Write;

use prost_reflect::{Kind, MessageDescriptor};

use super::schema::{BlockFields, BlockLine};
use super::wire::{fields, Malformed, Value};

/// The placeholder each rendered line carries for its task's name; the reader names the
/// task from the trace's process tree (`EventTable::name_tasks`), so a name with blanks
/// or brackets never has to survive the text form.
pub const UNNAMED: &str = "<...>";
const NS: u64 = 1_000_000_000;

/// ` <...>-pid [cpu] ..... s.ns: name: body` (`sep` ": "; "" for the syscall events,
/// whose print format is `sys_fsync(fd: 0x3)`).
pub fn line(ts: u64, cpu: u64, pid: i64, name: &str, sep: &str, body: &[u8]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(48 + name.len() + body.len());
    let _ = write!(
        out,
        " {UNNAMED}-{pid} [{cpu:03}] ..... {}.{:09}: {name}{sep}",
        ts / NS,
        ts % NS
    );
    out.extend_from_slice(body);
    out.push(b'\n');
    out.into_boxed_slice()
}

/// A string field as one line's text (a name never spans lines in tracefs either).
pub fn push_clean(out: &mut Vec<u8>, text: &[u8]) {
    out.extend(
        text.iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }),
    );
}

/// A block event's fields, by the numbers its message gives them.
#[derive(Default)]
struct Block<'a> {
    dev: u64,
    sector: u64,
    nr_sector: u64,
    bytes: u64,
    rwbs: &'a [u8],
    cmd: &'a [u8],
    comm: &'a [u8],
    error: Option<i64>,
    errors: i64,
    old_dev: u64,
    old_sector: u64,
    new_sector: u64,
}

fn read_block<'a>(body: &'a [u8], f: &BlockFields) -> Result<Block<'a>, Malformed> {
    let mut b = Block::default();
    for field in fields(body) {
        let (n, v) = field?;
        let n = Some(n);
        if n == f.dev {
            b.dev = v.uint();
        } else if n == f.sector {
            b.sector = v.uint();
        } else if n == f.nr_sector {
            b.nr_sector = v.uint();
        } else if n == f.bytes {
            b.bytes = v.uint();
        } else if n == f.rwbs {
            b.rwbs = v.bytes();
        } else if n == f.cmd {
            b.cmd = v.bytes();
        } else if n == f.comm {
            b.comm = v.bytes();
        } else if n == f.error {
            b.error = Some(v.int() as i32 as i64);
        } else if n == f.errors {
            b.errors = v.int() as i32 as i64;
        } else if n == f.old_dev {
            b.old_dev = v.uint();
        } else if n == f.old_sector {
            b.old_sector = v.uint();
        } else if n == f.new_sector {
            b.new_sector = v.uint();
        }
    }
    Ok(b)
}

/// The kernel's internal dev_t (`MKDEV`: major << 20 | minor) as `major,minor`.
fn dev(out: &mut Vec<u8>, kernel_dev: u64) {
    let _ = write!(out, "{},{}", kernel_dev >> 20, kernel_dev & 0xF_FFFF);
}

fn bracket(out: &mut Vec<u8>, comm: &[u8]) {
    if !comm.is_empty() {
        out.extend_from_slice(b" [");
        out.extend(comm.iter().map(|&b| match b {
            b'\n' | b'\r' => b' ',
            b']' => b')',
            b => b,
        }));
        out.push(b']');
    }
}

/// The body of a block event's line (after `name: `), as its tracepoint prints it.
pub fn block_body(
    shape: BlockLine,
    fields: &BlockFields,
    body: &[u8],
) -> Result<Vec<u8>, Malformed> {
    let b = read_block(body, fields)?;
    let mut out = Vec::with_capacity(64);
    dev(&mut out, b.dev);
    out.push(b' ');
    push_clean(&mut out, b.rwbs);
    let sectors = |out: &mut Vec<u8>| {
        let _ = write!(out, " {} + {}", b.sector, b.nr_sector);
    };
    let cmd = |out: &mut Vec<u8>| {
        out.extend_from_slice(b" (");
        push_clean(out, b.cmd);
        out.push(b')');
    };
    match shape {
        BlockLine::Request => {
            let _ = write!(out, " {}", b.bytes);
            cmd(&mut out);
            sectors(&mut out);
            bracket(&mut out, b.comm);
        }
        BlockLine::RequestComplete | BlockLine::Requeue => {
            cmd(&mut out);
            sectors(&mut out);
            // Kernels before 4.19 named the field `errors`; Perfetto keeps both.
            let error = if shape == BlockLine::Requeue {
                b.errors
            } else {
                b.error.unwrap_or(b.errors)
            };
            let _ = write!(out, " [{error}]");
        }
        BlockLine::Bio => {
            sectors(&mut out);
            bracket(&mut out, b.comm);
        }
        BlockLine::BioComplete => {
            sectors(&mut out);
            let _ = write!(out, " [{}]", b.error.unwrap_or(0));
        }
        BlockLine::Remap => {
            sectors(&mut out);
            out.extend_from_slice(b" <- (");
            dev(&mut out, b.old_dev);
            let _ = write!(out, ") {}", b.old_sector);
        }
        BlockLine::Split => {
            let _ = write!(out, " {} / {}", b.sector, b.new_sector);
            bracket(&mut out, b.comm);
        }
    }
    Ok(out)
}

/// Any other event as `name=value` pairs in the order of its fields (kept as an `other`
/// row's text): integers as the protos type them, strings as they are.
pub fn fields_body(message: &MessageDescriptor, body: &[u8]) -> Result<Vec<u8>, Malformed> {
    let mut out = Vec::with_capacity(64);
    push_fields(&mut out, message, body)?;
    Ok(out)
}

fn push_fields(
    out: &mut Vec<u8>,
    message: &MessageDescriptor,
    body: &[u8],
) -> Result<(), Malformed> {
    for field in fields(body) {
        let (number, value) = field?;
        let Some(desc) = message.get_field(number) else {
            continue; // a field newer than the protos: unknown, as to any protobuf reader
        };
        if !out.is_empty() {
            out.push(b' ');
        }
        let _ = write!(out, "{}=", desc.name());
        let kind = desc.kind();
        match (value, &kind) {
            (Value::Bytes(b), Kind::String) => push_clean(out, b),
            (Value::Bytes(b), Kind::Bytes) => b.iter().for_each(|x| {
                let _ = write!(out, "{x:02x}");
            }),
            (Value::Bytes(b), Kind::Message(inner)) => {
                out.push(b'{');
                let mut nested = Vec::new();
                push_fields(&mut nested, inner, b)?;
                out.extend_from_slice(&nested);
                out.push(b'}');
            }
            (Value::Bytes(run), _) => {
                // a packed repeated number
                let mut values = Vec::new();
                super::wire::push_ints(Value::Bytes(run), &mut values)?;
                out.push(b'[');
                for (i, v) in values.into_iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(b", ");
                    }
                    push_number(out, &kind, Value::Varint(v));
                }
                out.push(b']');
            }
            (scalar, _) => push_number(out, &kind, scalar),
        }
    }
    Ok(())
}

fn push_number(out: &mut Vec<u8>, kind: &Kind, v: Value<'_>) {
    let raw = v.uint();
    let _ = match kind {
        Kind::Int32 | Kind::Int64 | Kind::Enum(_) => write!(out, "{}", raw as i64),
        Kind::Sint32 | Kind::Sint64 => write!(out, "{}", (raw >> 1) as i64 ^ -((raw & 1) as i64)),
        Kind::Sfixed32 => write!(out, "{}", raw as u32 as i32),
        Kind::Sfixed64 => write!(out, "{}", raw as i64),
        Kind::Float => write!(out, "{}", f32::from_bits(raw as u32)),
        Kind::Double => write!(out, "{}", f64::from_bits(raw)),
        _ => write!(out, "{raw}"), // unsigned, fixed, bool (0 or 1, as the kernel prints it)
    };
}

/// A syscall row's number and arguments (or return value), named once the trace's
/// machine is known (its `system_info` may come last).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Syscall {
    pub cpu: u64,
    pub pid: i64,
    pub number: i64,
    pub call: Call,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Enter(Vec<u64>),
    Exit(i64),
}

/// Syscall numbers → names for each machine (`uname -m`), with the kernel's argument
/// names per call; the tables are sqlwa's (`sqlwa.analysis.syscalls`).
#[derive(Clone, Debug, Default)]
pub struct SyscallTables {
    /// Per machine (`uname -m`): syscall number → name.
    pub numbers: HashMap<String, HashMap<i64, String>>,
    /// Per syscall name: its arguments' names, in order, as the kernel prints them.
    pub arguments: HashMap<String, Vec<String>>,
    /// The machine assumed when a trace has no system_info (arm64: every phone).
    pub default_machine: String,
}

/// Names syscall rows through one machine's table; numbers it does not list stay numbers.
pub struct SyscallNames<'a> {
    pub machine: String,
    table: Option<&'a HashMap<i64, String>>,
    arguments: &'a HashMap<String, Vec<String>>,
    pub unknown: u64,
}

impl<'a> SyscallNames<'a> {
    pub fn new(tables: &'a SyscallTables, machine: Option<&str>) -> SyscallNames<'a> {
        let machine = machine
            .filter(|m| tables.numbers.contains_key(*m))
            .unwrap_or(&tables.default_machine)
            .to_string();
        SyscallNames {
            table: tables.numbers.get(&machine),
            machine,
            arguments: &tables.arguments,
            unknown: 0,
        }
    }

    /// The row's line: `sys_fsync(fd: 0x3)` or `sys_fsync -> 0x0`.
    pub fn line(&mut self, ts: u64, s: &Syscall) -> Box<[u8]> {
        let name = match self.table.and_then(|t| t.get(&s.number)) {
            Some(name) => name.clone(),
            None => {
                self.unknown += 1;
                s.number.to_string()
            }
        };
        let mut body = Vec::with_capacity(64);
        match &s.call {
            Call::Enter(values) => {
                body.push(b'(');
                let names = self
                    .arguments
                    .get(&name)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                for (i, (arg, value)) in names.iter().zip(values).enumerate() {
                    let _ = write!(body, "{}{arg}: 0x{value:x}", if i > 0 { ", " } else { "" });
                }
                body.push(b')');
            }
            Call::Exit(ret) => {
                let _ = write!(body, " -> 0x{:x}", *ret as u64);
            }
        }
        line(ts, s.cpu, s.pid, &format!("sys_{name}"), "", &body)
    }
}
