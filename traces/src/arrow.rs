//! The event table as an Arrow RecordBatch. Column vectors are handed over without
//! copying; only derived columns (flag booleans, null masks, dictionaries) are built.
use std::sync::Arc;

use arrow_array::types::{UInt32Type, UInt8Type};
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, LargeStringArray, PrimitiveArray, RecordBatch,
    StringArray,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use crate::table::{
    flags, zeroed_column, Action, EventTable, Operation, RecordKind, Sparse, SparseFields,
};

fn dict8() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::Utf8))
}
fn dict32() -> DataType {
    DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
}

/// The schema of [`to_record_batch`]'s output.
pub fn schema() -> SchemaRef {
    let f = |name: &str, dt: DataType, nullable: bool| Field::new(name, dt, nullable);
    Arc::new(Schema::new(vec![
        f("kind", dict8(), false),
        f("time_ns", DataType::UInt64, false),
        f("dev_major", DataType::UInt32, false),
        f("dev_minor", DataType::UInt32, false),
        f("cpu", DataType::UInt32, false),
        f("sequence", DataType::UInt64, false),
        f("pid", DataType::UInt32, false),
        f("comm", dict32(), false),
        f("action", dict8(), false),
        f("operation", dict8(), false),
        f("rwbs", dict32(), false),
        f("flags", DataType::UInt16, false),
        f("preflush", DataType::Boolean, false),
        f("fua", DataType::Boolean, false),
        f("sync", DataType::Boolean, false),
        f("meta", DataType::Boolean, false),
        f("readahead", DataType::Boolean, false),
        f("sector", DataType::UInt64, false),
        f("sectors", DataType::UInt32, false),
        f("bytes", DataType::UInt64, false),
        f("error", DataType::Int32, false),
        f("remap_dev_major", DataType::UInt32, true),
        f("remap_dev_minor", DataType::UInt32, true),
        f("remap_sector", DataType::UInt64, true),
        f("aux", DataType::UInt64, false),
        f("cgroup_id", DataType::UInt64, false),
        f("name", dict32(), false),
        f("fd", DataType::Int64, true),
        f("ret", DataType::Int64, true),
        f("text", DataType::LargeUtf8, false),
    ]))
}

fn prim<T: arrow_array::ArrowPrimitiveType>(
    v: Vec<T::Native>,
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(v), nulls))
}

fn fixed_dict(codes: Vec<u8>, names: Vec<&str>) -> Result<ArrayRef, ArrowError> {
    dictionary::<UInt8Type>(codes, Arc::new(StringArray::from(names)))
}

fn interned(codes: Vec<u32>, values: &[String]) -> Result<ArrayRef, ArrowError> {
    dictionary::<UInt32Type>(
        codes,
        Arc::new(StringArray::from_iter_values(values.iter())),
    )
}

/// A dictionary column. The keys are checked with one maximum over them rather than
/// `try_new`'s key-by-key check, which cost as much as the rest of the conversion.
fn dictionary<K>(codes: Vec<K::Native>, values: ArrayRef) -> Result<ArrayRef, ArrowError>
where
    K: arrow_array::types::ArrowDictionaryKeyType,
    K::Native: Ord + Into<u64>,
{
    let largest = codes.iter().copied().max().map_or(0, Into::into);
    if !codes.is_empty() && largest >= values.len() as u64 {
        return Err(ArrowError::InvalidArgumentError(format!(
            "dictionary code {largest} past its {} values",
            values.len()
        )));
    }
    let keys = PrimitiveArray::<K>::new(ScalarBuffer::from(codes), None);
    // SAFETY: the keys have no nulls and every key is below the number of values (checked
    // above), which is all try_new checks.
    Ok(Arc::new(unsafe {
        DictionaryArray::<K>::new_unchecked(keys, values)
    }))
}

/// The boolean columns of the given flag bits (each in the low byte), all in one pass over
/// `flags`, eight rows at a time: their low bytes side by side in one word give each flag's
/// eight bits with a mask and a multiply.
fn flag_columns<const K: usize>(flags: &[u16], bits: [u16; K]) -> [ArrayRef; K] {
    const LOW_BITS: u64 = 0x0101_0101_0101_0101;
    // Moves bit 0 of byte j to bit 56 + j (no two products meet, so nothing carries).
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let shifts = bits.map(|b| {
        assert!(
            b.count_ones() == 1 && b < 0x100,
            "flag bits are single bits of the low byte"
        );
        b.trailing_zeros()
    });
    let words = flags.len().div_ceil(64);
    let mut out: [Vec<u64>; K] = std::array::from_fn(|_| Vec::with_capacity(words));
    for chunk in flags.chunks(64) {
        let mut w = [0u64; K];
        for (g, group) in chunk.chunks(8).enumerate() {
            let low_bytes = group
                .iter()
                .enumerate()
                .fold(0u64, |x, (j, &f)| x | ((f & 0xff) as u64) << (8 * j));
            for k in 0..K {
                let eight = ((low_bytes >> shifts[k]) & LOW_BITS).wrapping_mul(GATHER) >> 56;
                w[k] |= eight << (8 * g);
            }
        }
        for k in 0..K {
            out[k].push(w[k]);
        }
    }
    out.map(|v| {
        Arc::new(BooleanArray::new(
            BooleanBuffer::new(Buffer::from_vec(v), 0, flags.len()),
            None,
        )) as ArrayRef
    })
}

/// The sparse fields as dense columns, zero (and null where the column has a null mask)
/// in rows without the field.
struct SparseColumns {
    remap_major: Vec<u32>,
    remap_minor: Vec<u32>,
    remap_sector: Vec<u64>,
    remap_valid: NullBuffer,
    aux: Vec<u64>,
    cgroup_id: Vec<u64>,
    fd: Vec<i64>,
    fd_valid: NullBuffer,
    ret: Vec<i64>,
    ret_valid: NullBuffer,
}

fn sparse_columns(n: usize, s: &SparseFields) -> SparseColumns {
    SparseColumns {
        remap_major: scatter(n, &s.remap, |(major, _, _)| major),
        remap_minor: scatter(n, &s.remap, |(_, minor, _)| minor),
        remap_sector: scatter(n, &s.remap, |(_, _, sector)| sector),
        remap_valid: validity(n, &s.remap),
        aux: scatter(n, &s.aux, |v| v),
        cgroup_id: scatter(n, &s.cgroup_id, |v| v),
        fd: scatter(n, &s.fd, |v| v),
        fd_valid: validity(n, &s.fd),
        ret: scatter(n, &s.ret, |v| v),
        ret_valid: validity(n, &s.ret),
    }
}

/// A dense column of `n` rows: `value` of each sparse entry in its row, zero elsewhere. The
/// zeroed allocation comes straight from the OS, so pages no row writes cost nothing.
fn scatter<T, U>(n: usize, sparse: &Sparse<T>, value: impl Fn(T) -> U + Sync) -> Vec<U>
where
    T: Copy + Sync,
    U: Copy + Default + Send,
{
    let entries = &sparse.0;
    let mut column = zeroed_column(n, entries.len());
    let fill = |rows: &mut [U], first_row: usize, entries: &[(usize, T)]| {
        for &(row, v) in entries {
            rows[row - first_row] = value(v);
        }
    };
    // Writing the rows is mostly the kernel zeroing the pages they land on: with many
    // entries, two threads take a half of the rows each.
    if entries.len() >= 1 << 16 {
        let middle = n / 2;
        let split = entries.partition_point(|&(row, _)| row < middle);
        let (low, high) = column.split_at_mut(middle);
        std::thread::scope(|s| {
            s.spawn(|| fill(high, middle, &entries[split..]));
            fill(low, 0, &entries[..split]);
        });
    } else {
        fill(&mut column, 0, entries);
    }
    column
}

/// The null mask of a column that has values in the sparse entries' rows only.
fn validity<T>(n: usize, sparse: &Sparse<T>) -> NullBuffer {
    let mut bits = vec![0u64; n.div_ceil(64)];
    for &(row, _) in &sparse.0 {
        bits[row / 64] |= 1 << (row % 64);
    }
    NullBuffer::new(BooleanBuffer::new(Buffer::from_vec(bits), 0, n))
}

fn text_column(n: usize, text_end: &Sparse<usize>, data: Vec<u8>) -> Result<ArrayRef, ArrowError> {
    if data.is_empty() {
        // No row has text: every offset is zero, pages that nothing writes or reads.
        let offsets = ScalarBuffer::from(zeroed_column::<i64>(n + 1, 0));
        // SAFETY: all-zero offsets are monotonic and within the empty data, and the empty
        // string is UTF-8; try_new would only read every page to check that.
        return Ok(Arc::new(unsafe {
            LargeStringArray::new_unchecked(
                OffsetBuffer::new_unchecked(offsets),
                Buffer::from_vec(data),
                None,
            )
        }));
    }
    // With any text, every offset after the first text row is written.
    let mut offsets = zeroed_column(n + 1, n);
    {
        // Rows without text repeat the offset before them: fill those runs at once.
        let (mut end, mut filled) = (0i64, 1usize);
        for &(row, text_end) in &text_end.0 {
            offsets[filled..=row].fill(end);
            end = text_end as i64;
            offsets[row + 1] = end;
            filled = row + 2;
        }
        offsets[filled.min(n + 1)..].fill(end);
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    let data = Buffer::from_vec(data);
    // try_new checks the UTF-8 and that every offset falls on a character boundary.
    if let Ok(array) = LargeStringArray::try_new(offsets.clone(), data.clone(), None) {
        return Ok(Arc::new(array));
    }
    // Non-UTF-8 bytes (a corrupt message record): keep the rows, replace the bad bytes.
    let strings = offsets
        .windows(2)
        .map(|w| String::from_utf8_lossy(&data[w[0] as usize..w[1] as usize]).into_owned());
    Ok(Arc::new(LargeStringArray::from_iter_values(strings)))
}

/// Converts the table into one RecordBatch, consuming it: the columns of [`schema`], the
/// table's column vectors handed over without a copy.
///
/// ```
/// use arrow_array::{cast::AsArray, types::UInt64Type};
/// use blktrace_parse::{arrow::to_record_batch, parse_paths, Format};
/// # let trace = "\
/// #     sqlite-1234 [001] d..1. 1234.567890: block_rq_issue: 7,0 WS 4096 () 1234 + 8 [sqlite]
/// #     <idle>-0    [001] ..s1. 1234.567990: block_rq_complete: 7,0 WS () 1234 + 8 [0]
/// # ";
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("trace.txt");
/// # std::fs::write(&path, trace)?;
/// // `path`: the two-line ftrace trace of the crate's example (an issue and a completion).
/// let (table, _report) = parse_paths(&[path], Format::Auto, false)?;
/// let batch = to_record_batch(table)?;
/// assert_eq!(batch.num_rows(), 2);
/// let bytes = batch.column_by_name("bytes").unwrap().as_primitive::<UInt64Type>();
/// // The completion prints no byte count: its 8 sectors are 4096 bytes.
/// assert_eq!(bytes.values(), &[4096, 4096]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn to_record_batch(mut t: EventTable) -> Result<RecordBatch, ArrowError> {
    use arrow_array::types::{Int32Type, Int64Type, UInt16Type, UInt64Type};
    let n = t.len();
    use std::mem::take;
    let (comm, rwbs, name) = (take(&mut t.comm), take(&mut t.rwbs), take(&mut t.name));
    let (kind, action, operation) = (
        take(&mut t.kind),
        take(&mut t.action),
        take(&mut t.operation),
    );
    // Three independent pieces on their own threads: the sparse columns (mostly the kernel
    // zeroing their pages), the flag booleans, and the dictionary columns.
    let (sparse, flag_bools, dicts) = std::thread::scope(|s| {
        let sparse = s.spawn(|| sparse_columns(n, &t.sparse));
        let flag_bools = s.spawn(|| {
            flag_columns(
                &t.flags,
                [
                    flags::PREFLUSH,
                    flags::FUA,
                    flags::SYNC,
                    flags::META,
                    flags::READAHEAD,
                ],
            )
        });
        let dicts = (|| -> Result<[ArrayRef; 6], ArrowError> {
            Ok([
                fixed_dict(kind, RecordKind::ALL.iter().map(|k| k.name()).collect())?,
                interned(comm, &t.comms.values)?,
                fixed_dict(action, Action::ALL.iter().map(|a| a.name()).collect())?,
                fixed_dict(operation, Operation::ALL.iter().map(|o| o.name()).collect())?,
                interned(rwbs, &t.rwbs_values.values)?,
                interned(name, &t.names.values)?,
            ])
        })();
        (
            sparse.join().expect("sparse column thread panicked"),
            flag_bools.join().expect("flag column thread panicked"),
            dicts,
        )
    });
    let [kind, comm, action, operation, rwbs, name] = dicts?;
    let SparseColumns {
        remap_major,
        remap_minor,
        remap_sector,
        remap_valid,
        aux,
        cgroup_id,
        fd,
        fd_valid,
        ret,
        ret_valid,
    } = sparse;
    // Text rows are ordered by row, so the text bytes are already in row order.
    let text = text_column(
        n,
        &t.sparse.text_end,
        std::mem::take(&mut t.sparse.text_data),
    )?;
    let mut columns: Vec<ArrayRef> = vec![
        kind,
        prim::<UInt64Type>(t.time_ns, None),
        prim::<UInt32Type>(t.dev_major, None),
        prim::<UInt32Type>(t.dev_minor, None),
        prim::<UInt32Type>(t.cpu, None),
        prim::<UInt64Type>(t.sequence, None),
        prim::<UInt32Type>(t.pid, None),
        comm,
        action,
        operation,
        rwbs,
        prim::<UInt16Type>(t.flags, None),
    ];
    columns.extend(flag_bools);
    columns.extend([
        prim::<UInt64Type>(t.sector, None),
        prim::<UInt32Type>(t.sectors, None),
        prim::<UInt64Type>(t.bytes, None),
        prim::<Int32Type>(t.error, None),
        prim::<UInt32Type>(remap_major, Some(remap_valid.clone())),
        prim::<UInt32Type>(remap_minor, Some(remap_valid.clone())),
        prim::<UInt64Type>(remap_sector, Some(remap_valid)),
        prim::<UInt64Type>(aux, None),
        prim::<UInt64Type>(cgroup_id, None),
        name,
        prim::<Int64Type>(fd, Some(fd_valid)),
        prim::<Int64Type>(ret, Some(ret_valid)),
        text,
    ]);
    RecordBatch::try_new(schema(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_paths, Format};

    #[test]
    fn sample_converts_with_every_column() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("samples/blkparse-nvme-dmcrypt/nvme0n1.blktrace.txt");
        let (t, _) = parse_paths(&[path], Format::Auto, false).unwrap();
        let n = t.len();
        let batch = to_record_batch(t).unwrap();
        assert_eq!(batch.num_rows(), n);
        assert_eq!(batch.num_columns(), schema().fields().len());
        let remap = batch.column_by_name("remap_dev_major").unwrap();
        assert_eq!(remap.len() - remap.null_count(), 473);
    }

    /// A table of `rows` rows that set each sparse field alone, together, or not at all;
    /// `with_text` adds text to some rows.
    fn sparse_table(rows: u64, with_text: bool) -> EventTable {
        let mut t = EventTable::new();
        let comm = t.comms.intern(b"dd");
        let rwbs = t.rwbs_values.intern(b"WS");
        let name = t.names.intern(b"fsync");
        for row in 0..rows {
            let mut e = crate::table::Event {
                time_ns: row,
                pid: row as u32,
                flags: row as u16 & 0x1f,
                ..Default::default()
            };
            if row % 3 == 0 {
                e.remap = Some((253, row as u32, row * 8));
            }
            if row % 5 == 0 {
                e.aux = row + 1;
            }
            if row % 7 == 0 {
                e.cgroup_id = row + 2;
            }
            if row % 11 == 0 {
                e.fd = Some(row as i64 - 50);
            }
            if row % 13 == 0 {
                e.ret = Some(-(row as i64));
            }
            let text = if with_text && row % 4 == 0 {
                format!("row {row}")
            } else {
                String::new()
            };
            t.push(
                &e,
                if row % 2 == 0 { comm } else { 0 },
                rwbs,
                name,
                text.as_bytes(),
            );
        }
        t
    }

    #[test]
    fn sparse_and_dictionary_columns_match_the_table_row_by_row() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::{Int64Type, UInt64Type};
        use arrow_array::Array;
        // 200 000 rows: enough remaps (every third row) for the conversion to fill those
        // columns on two threads.
        for (rows, with_text) in [(200, false), (200, true), (200_000, true)] {
            let t = sparse_table(rows, with_text);
            let batch = to_record_batch(t.clone()).unwrap();
            let col = |name: &str| batch.column_by_name(name).unwrap().clone();
            let (remap_minor, remap_sector) = (col("remap_dev_minor"), col("remap_sector"));
            let (remap_minor, remap_sector) = (
                remap_minor.as_primitive::<UInt32Type>(),
                remap_sector.as_primitive::<UInt64Type>(),
            );
            let (aux, cgroup) = (col("aux"), col("cgroup_id"));
            let (fd, ret) = (col("fd"), col("ret"));
            let (fd, ret) = (
                fd.as_primitive::<Int64Type>(),
                ret.as_primitive::<Int64Type>(),
            );
            let text = col("text");
            let text = text.as_string::<i64>();
            let comm = col("comm");
            let comm = comm.as_dictionary::<UInt32Type>();
            let comm_values = comm.values().as_string::<i32>();
            for i in 0..t.len() {
                let remap = remap_minor
                    .is_valid(i)
                    .then(|| (253, remap_minor.value(i), remap_sector.value(i)));
                assert_eq!(remap, t.remap_at(i), "remap row {i}");
                assert_eq!(
                    aux.as_primitive::<UInt64Type>().value(i),
                    t.aux_at(i),
                    "aux row {i}"
                );
                assert_eq!(
                    cgroup.as_primitive::<UInt64Type>().value(i),
                    t.cgroup_id_at(i),
                    "cgroup row {i}"
                );
                assert_eq!(
                    fd.is_valid(i).then(|| fd.value(i)),
                    t.fd_at(i),
                    "fd row {i}"
                );
                assert_eq!(
                    ret.is_valid(i).then(|| ret.value(i)),
                    t.ret_at(i),
                    "ret row {i}"
                );
                assert_eq!(text.value(i), t.text_at(i), "text row {i}");
                assert_eq!(
                    comm_values.value(comm.keys().value(i) as usize),
                    t.comm_at(i),
                    "comm row {i}"
                );
            }
            assert_eq!(remap_minor.null_count(), t.len() - t.len().div_ceil(3));
        }
    }

    #[test]
    fn a_dictionary_code_past_its_values_is_an_error_not_a_panic() {
        let mut t = sparse_table(200, false);
        t.rwbs[7] = 99;
        let err = to_record_batch(t).unwrap_err().to_string();
        assert!(err.contains("dictionary code 99"), "{err}");
    }

    #[test]
    fn text_and_flag_columns_match_the_table_row_by_row() {
        use arrow_array::Array;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("samples/ftrace-loop-ext4/trace.txt");
        let (t, _) = parse_paths(&[path], Format::Auto, false).unwrap();
        let n = t.len();
        let texts: Vec<String> = (0..n).map(|i| t.text_at(i).to_string()).collect();
        let row_flags = t.flags.clone();
        assert!(texts.iter().any(|s| !s.is_empty()) && texts.last().is_some_and(|s| s.is_empty()));
        let batch = to_record_batch(t).unwrap();
        let text = batch
            .column_by_name("text")
            .unwrap()
            .as_any()
            .downcast_ref::<LargeStringArray>()
            .unwrap();
        for (i, want) in texts.iter().enumerate() {
            assert_eq!(text.value(i), want, "row {i}");
        }
        for (name, bit) in [
            ("preflush", flags::PREFLUSH),
            ("fua", flags::FUA),
            ("sync", flags::SYNC),
            ("meta", flags::META),
            ("readahead", flags::READAHEAD),
        ] {
            let col = batch
                .column_by_name(name)
                .unwrap()
                .as_any()
                .downcast_ref::<BooleanArray>()
                .unwrap();
            assert_eq!(col.len(), n);
            for (i, f) in row_flags.iter().enumerate() {
                assert_eq!(col.value(i), f & bit != 0, "{name} row {i}");
            }
        }
    }
}
