//! Bad input: errors name the file and the byte offset or line; lenient mode counts.
mod common;

use blktrace_parse::writer::{self, act, dev, RawRecord};
use blktrace_parse::{parse_paths, Format};
use common::Scratch;

fn one_record(big_endian: bool, version: u32) -> Vec<u8> {
    let r = RawRecord {
        sequence: 1,
        time: 5,
        sector: 8,
        bytes: 4096,
        action: act(7, 2 | 1 << 6),
        pid: 9,
        device: dev(8, 0),
        ..Default::default()
    };
    let mut out = Vec::new();
    writer::write_record(&mut out, &r, big_endian, version);
    out
}

fn parse_bytes(
    dir: &Scratch,
    name: &str,
    bytes: &[u8],
    format: Format,
    lenient: bool,
) -> Result<blktrace_parse::ParseReport, String> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    parse_paths(&[path], format, lenient)
        .map(|(_, r)| r)
        .map_err(|e| e.to_string())
}

#[test]
fn truncated_record_names_file_and_offset() {
    let dir = Scratch::new("trunc");
    let mut bytes = one_record(false, 7);
    bytes.extend_from_slice(&one_record(false, 7)[..30]);
    let err = parse_bytes(&dir, "t.blktrace.0", &bytes, Format::Auto, false).unwrap_err();
    assert!(
        err.contains("t.blktrace.0 at byte offset 48: truncated record"),
        "{err}"
    );
    let report = parse_bytes(&dir, "t.blktrace.0", &bytes, Format::Auto, true).unwrap();
    assert_eq!((report.events, report.bad_records), (1, 1));
}

#[test]
fn truncated_payload_is_an_error() {
    let dir = Scratch::new("trunc-pdu");
    let r = RawRecord {
        action: act(10, 1 << 4),
        pdu: writer::be64_pdu(3),
        ..Default::default()
    };
    let mut bytes = Vec::new();
    writer::write_record(&mut bytes, &r, false, 7);
    bytes.truncate(52);
    let err = parse_bytes(&dir, "p.blktrace.0", &bytes, Format::Blktrace, false).unwrap_err();
    assert!(
        err.contains("at byte offset 0: truncated record: payload"),
        "{err}"
    );
}

#[test]
fn bad_magic_mid_file() {
    let dir = Scratch::new("magic");
    let mut bytes = one_record(true, 7);
    bytes.extend_from_slice(&[0xde; 48]);
    let err = parse_bytes(&dir, "m.blktrace.0", &bytes, Format::Blktrace, false).unwrap_err();
    assert!(err.contains("at byte offset 48: bad magic"), "{err}");
}

#[test]
fn not_a_trace_at_all() {
    let dir = Scratch::new("garbage-bin");
    let err = parse_bytes(&dir, "g.blktrace.0", &[0xde; 100], Format::Blktrace, false).unwrap_err();
    assert!(err.contains("at byte offset 0: bad magic"), "{err}");
    let err = parse_bytes(&dir, "g.txt", b"\x00\x01binary junk", Format::Auto, false).unwrap_err();
    assert!(err.contains("unrecognised trace format"), "{err}");
}

#[test]
fn version_8_is_refused_clearly_and_others_are_unknown() {
    let dir = Scratch::new("version");
    let err = parse_bytes(
        &dir,
        "v8.blktrace.0",
        &one_record(false, 8),
        Format::Auto,
        false,
    )
    .unwrap_err();
    assert!(
        err.contains("version 8") && err.contains("not supported"),
        "{err}"
    );
    let err = parse_bytes(
        &dir,
        "v6.blktrace.0",
        &one_record(false, 6),
        Format::Auto,
        false,
    )
    .unwrap_err();
    assert!(err.contains("unknown blktrace format version 6"), "{err}");
}

#[test]
fn garbage_lines_name_the_line() {
    let dir = Scratch::new("garbage-text");
    let text = b"  8,0    1        1     0.000000000   100  D   W 8 + 8 [dd]\nthis is not blkparse\n  8,0    1        2     0.000000100   100  C   W 8 + 8 [0]\n";
    let err = parse_bytes(&dir, "b.txt", text, Format::Blkparse, false).unwrap_err();
    assert!(
        err.contains("b.txt line 2: not a blkparse event line"),
        "{err}"
    );
    let report = parse_bytes(&dir, "b.txt", text, Format::Blkparse, true).unwrap();
    assert_eq!((report.events, report.bad_records), (2, 1));
    assert!(report.bad_messages[0].contains("line 2"));

    let text = b"dd-1 [000] 1.000001: block_rq_issue: 8,0 W 4096 () 8 + 8 [dd]\ngarbage\n";
    let err = parse_bytes(&dir, "f.txt", text, Format::Ftrace, false).unwrap_err();
    assert!(err.contains("f.txt line 2: not an ftrace line"), "{err}");
}

#[test]
fn a_refused_line_is_shown_whole() {
    let dir = Scratch::new("whole-line");
    let line = "     kworker/u16:3-1234567 [003] d..1. 123456.789012: block_rq_issue: 259,0 WQS 4096 () 96672995 + 8 be,0,4 [kworker/u16:3]";
    assert!(line.len() > 100);
    let err = parse_bytes(&dir, "f.txt", line.as_bytes(), Format::Ftrace, false).unwrap_err();
    assert!(err.ends_with(&format!("(bad RWBS): {line}")), "{err}");
    // A binary file read as text: its "line" is shown cut, saying how much is left out.
    let junk = format!("{line}{}", "x".repeat(5000));
    let err = parse_bytes(&dir, "j.txt", junk.as_bytes(), Format::Ftrace, false).unwrap_err();
    let more = junk.len() - 1024;
    assert!(err.ends_with(&format!(" … ({more} more bytes)")), "{err}");
}

#[test]
fn missing_file_and_unknown_format() {
    let err = parse_paths(&["/nonexistent/trace".into()], Format::Auto, false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/trace"), "{err}");
    assert!("nope".parse::<Format>().is_err());
}

/// A time of 2^63 ns or more (292 years) is no clock's: the record is refused where it is
/// read, in either byte order and on the fast paths, instead of becoming a row that every
/// signed-time computation downstream fails on. Lenient mode skips it and counts it.
#[test]
fn time_with_the_top_bit_set_is_a_bad_record() {
    let dir = Scratch::new("top-bit-time");
    for big_endian in [false, true] {
        let mut bytes = Vec::new();
        for (sequence, time) in [(1, 5), (2, 1 << 63), (3, 7)] {
            let r = RawRecord {
                sequence,
                time,
                bytes: 4096,
                action: act(7, 2 | 1 << 6),
                device: dev(8, 0),
                ..Default::default()
            };
            writer::write_record(&mut bytes, &r, big_endian, 7);
        }
        let err = parse_bytes(&dir, "t.blktrace.0", &bytes, Format::Auto, false).unwrap_err();
        assert!(
            err.contains("t.blktrace.0 at byte offset 48: time 9223372036854775808 ns"),
            "{err}"
        );
        let report = parse_bytes(&dir, "t.blktrace.0", &bytes, Format::Auto, true).unwrap();
        assert_eq!((report.events, report.bad_records), (1, 1), "{report:?}");
    }
}

/// Text timestamps past 2^63 ns (ten digits of seconds reach it; a counter clock's plain
/// integer too) are bad lines, in blkparse and ftrace text alike.
#[test]
fn text_times_past_the_signed_range_are_bad_lines() {
    let dir = Scratch::new("top-bit-text");
    let blkparse = b"  8,0    1        1  9223372036.854775808   100  D   W 8 + 8 [dd]\n";
    let err = parse_bytes(&dir, "b.txt", blkparse, Format::Blkparse, false).unwrap_err();
    assert!(err.contains("b.txt line 1"), "{err}");
    let at_the_limit = b"  8,0    1        1  9223372036.854775807   100  D   W 8 + 8 [dd]\n";
    assert!(parse_bytes(&dir, "b.txt", at_the_limit, Format::Blkparse, false).is_ok());
    for stamp in ["9999999999.999999", "9223372036854775808"] {
        let line = format!("dd-1 [000] {stamp}: block_rq_issue: 8,0 W 4096 () 8 + 8 [dd]\n");
        let err = parse_bytes(&dir, "f.txt", line.as_bytes(), Format::Ftrace, false).unwrap_err();
        assert!(
            err.contains("f.txt line 1: not an ftrace line (bad timestamp)"),
            "{stamp}: {err}"
        );
    }
}

/// A rejected line is quoted with its control characters escaped: raw, a vertical tab or a
/// carriage return broke the one-line message on a terminal.
#[test]
fn a_quoted_line_keeps_the_message_on_one_line() {
    let dir = Scratch::new("control-chars");
    let err = parse_bytes(
        &dir,
        "c.txt",
        b"x\x0by\rz\x00\xc2\x85\n",
        Format::Blkparse,
        false,
    )
    .unwrap_err();
    assert!(err.ends_with(r"x\u{b}y\rz\u{0}\u{85}"), "{err}");
}

/// A path that is there but is no trace file says what it is, not "no such file".
#[test]
fn a_directory_or_a_device_is_no_trace_file() {
    let dir = Scratch::new("not-a-file");
    for (path, says) in [
        (dir.to_path_buf(), "a directory, not a trace file"),
        (
            "/dev/null".into(),
            "not a regular file (a device or a pipe)",
        ),
    ] {
        let err = parse_paths(std::slice::from_ref(&path), Format::Auto, false).unwrap_err();
        assert_eq!(err.to_string(), format!("{}: {says}", path.display()));
    }
}
