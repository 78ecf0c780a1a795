//! `tracing_mark_write` markers: sqlwa writes `sqlwa EVENT key=value …`.
use super::push_text_row;
use crate::table::{Event, RowWriter};
use crate::text::Cursor;

/// A marker row (`e` of kind marker): its event word as the name, the whole text kept.
pub(super) fn push_marker(table: &mut RowWriter<'_>, e: Event, comm: &[u8], text: &[u8]) {
    push_text_row(table, &e, comm, marker_event(text), text);
}

/// `sqlwa txn_begin i=3 …` → `txn_begin`; foreign markers have no event word.
fn marker_event(body: &[u8]) -> &[u8] {
    let mut c = Cursor::new(body);
    if c.word() == Some(b"sqlwa") {
        c.word().unwrap_or_default()
    } else {
        b""
    }
}
