//! The event table as an Arrow RecordBatch. Column vectors are handed over without
//! copying; only derived columns (flag booleans, null masks, dictionaries) are built.
use std::sync::Arc;

use arrow_array::types::{UInt32Type, UInt8Type};
use arrow_array::{ArrayRef, BooleanArray, DictionaryArray, LargeStringArray, PrimitiveArray, RecordBatch, StringArray};
use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use crate::table::{flags, zeroed_column, Action, EventTable, Extra, Operation, RecordKind};

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

fn prim<T: arrow_array::ArrowPrimitiveType>(v: Vec<T::Native>, nulls: Option<NullBuffer>) -> ArrayRef {
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::from(v), nulls))
}

fn fixed_dict(codes: Vec<u8>, names: Vec<&str>) -> Result<ArrayRef, ArrowError> {
    let keys = PrimitiveArray::<UInt8Type>::new(ScalarBuffer::from(codes), None);
    Ok(Arc::new(DictionaryArray::<UInt8Type>::try_new(keys, Arc::new(StringArray::from(names)))?))
}

fn interned(codes: Vec<u32>, values: &[String]) -> Result<ArrayRef, ArrowError> {
    let keys = PrimitiveArray::<UInt32Type>::new(ScalarBuffer::from(codes), None);
    let values = StringArray::from_iter_values(values.iter());
    Ok(Arc::new(DictionaryArray::<UInt32Type>::try_new(keys, Arc::new(values))?))
}

/// The boolean columns of the given flag bits, all in one pass over `flags`.
fn flag_columns<const K: usize>(flags: &[u16], bits: [u16; K]) -> [ArrayRef; K] {
    let words = flags.len().div_ceil(64);
    let mut out: [Vec<u64>; K] = std::array::from_fn(|_| Vec::with_capacity(words));
    for chunk in flags.chunks(64) {
        let mut w = [0u64; K];
        for (i, &f) in chunk.iter().enumerate() {
            for k in 0..K {
                w[k] |= ((f & bits[k] != 0) as u64) << i;
            }
        }
        for k in 0..K {
            out[k].push(w[k]);
        }
    }
    out.map(|v| Arc::new(BooleanArray::new(BooleanBuffer::new(Buffer::from_vec(v), 0, flags.len()), None)) as ArrayRef)
}

/// A dense column from the sparse extras: zero where a row has no entry. The zeroed
/// allocation comes straight from the OS, so pages no row writes cost nothing.
fn scatter<T: Copy + Default + arrow_buffer::ArrowNativeType>(n: usize, extras: &[Extra], get: impl Fn(&Extra) -> Option<T>) -> (Vec<T>, Option<NullBuffer>) {
    let mut values = zeroed_column(n, extras.len());
    let mut valid: Option<BooleanBufferBuilder> = None;
    for x in extras {
        if let Some(v) = get(x) {
            values[x.row] = v;
            valid
                .get_or_insert_with(|| {
                    let mut b = BooleanBufferBuilder::new(n);
                    b.append_n(n, false);
                    b
                })
                .set_bit(x.row, true);
        }
    }
    let nulls = match valid {
        Some(mut b) => Some(NullBuffer::new(b.finish())),
        None => Some(NullBuffer::new_null(n)),
    };
    (values, nulls)
}

fn text_column(n: usize, extras: &[Extra], data: Vec<u8>) -> Result<ArrayRef, ArrowError> {
    // With any text, every offset after the first text row is written.
    let mut offsets = zeroed_column(n + 1, if data.is_empty() { 0 } else { n });
    if !data.is_empty() {
        // Rows without text repeat the offset before them: fill those runs at once.
        let (mut end, mut filled) = (0i64, 1usize);
        for x in extras {
            offsets[filled..=x.row].fill(end);
            end += (x.text.1 - x.text.0) as i64;
            offsets[x.row + 1] = end;
            filled = x.row + 2;
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
    let strings = offsets.windows(2).map(|w| String::from_utf8_lossy(&data[w[0] as usize..w[1] as usize]).into_owned());
    Ok(Arc::new(LargeStringArray::from_iter_values(strings)))
}

/// Converts the table into one RecordBatch, consuming it.
pub fn to_record_batch(mut t: EventTable) -> Result<RecordBatch, ArrowError> {
    use arrow_array::types::{Int32Type, Int64Type, UInt16Type, UInt64Type};
    let n = t.len();
    use std::mem::take;
    let (comm, rwbs, name) = (take(&mut t.comm), take(&mut t.rwbs), take(&mut t.name));
    let (kind, action, operation) = (take(&mut t.kind), take(&mut t.action), take(&mut t.operation));
    // Three independent pieces on their own threads: the sparse columns (mostly the kernel
    // zeroing their pages), the flag booleans, and the dictionary columns (whose keys Arrow
    // checks one by one).
    let (sparse, flag_bools, dicts) = std::thread::scope(|s| {
        let sparse = s.spawn(|| {
            let remap = scatter(n, &t.extras, |x| x.remap.map(|r| r.0));
            let remap_minor = scatter(n, &t.extras, |x| x.remap.map(|r| r.1)).0;
            let remap_sector = scatter(n, &t.extras, |x| x.remap.map(|r| r.2)).0;
            let aux = scatter(n, &t.extras, |x| (x.aux != 0).then_some(x.aux)).0;
            let cgroup_id = scatter(n, &t.extras, |x| (x.cgroup_id != 0).then_some(x.cgroup_id)).0;
            let fd = scatter(n, &t.extras, |x| x.fd);
            let ret = scatter(n, &t.extras, |x| x.ret);
            (remap, remap_minor, remap_sector, aux, cgroup_id, fd, ret)
        });
        let flag_bools = s.spawn(|| flag_columns(&t.flags, [flags::PREFLUSH, flags::FUA, flags::SYNC, flags::META, flags::READAHEAD]));
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
        (sparse.join().expect("sparse column thread panicked"), flag_bools.join().expect("flag column thread panicked"), dicts)
    });
    let [kind, comm, action, operation, rwbs, name] = dicts?;
    let ((remap_major, remap_nulls), remap_minor, remap_sector, aux, cgroup_id, (fd, fd_nulls), (ret, ret_nulls)) = sparse;
    // Text rows are ordered by row, so the text bytes are already in row order.
    let text = text_column(n, &t.extras, t.text_data)?;
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
        prim::<UInt32Type>(remap_major, remap_nulls.clone()),
        prim::<UInt32Type>(remap_minor, remap_nulls.clone()),
        prim::<UInt64Type>(remap_sector, remap_nulls),
        prim::<UInt64Type>(aux, None),
        prim::<UInt64Type>(cgroup_id, None),
        name,
        prim::<Int64Type>(fd, fd_nulls),
        prim::<Int64Type>(ret, ret_nulls),
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
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/blkparse-nvme-dmcrypt/nvme0n1.blktrace.txt");
        let (t, _) = parse_paths(&[path], Format::Auto, false).unwrap();
        let n = t.len();
        let batch = to_record_batch(t).unwrap();
        assert_eq!(batch.num_rows(), n);
        assert_eq!(batch.num_columns(), schema().fields().len());
        let remap = batch.column_by_name("remap_dev_major").unwrap();
        assert_eq!(remap.len() - remap.null_count(), 473);
    }

    #[test]
    fn text_and_flag_columns_match_the_table_row_by_row() {
        use arrow_array::Array;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ftrace-loop-ext4/trace.txt");
        let (t, _) = parse_paths(&[path], Format::Auto, false).unwrap();
        let n = t.len();
        let texts: Vec<String> = (0..n).map(|i| t.text_at(i).to_string()).collect();
        let row_flags = t.flags.clone();
        assert!(texts.iter().any(|s| !s.is_empty()) && texts.last().is_some_and(|s| s.is_empty()));
        let batch = to_record_batch(t).unwrap();
        let text = batch.column_by_name("text").unwrap().as_any().downcast_ref::<LargeStringArray>().unwrap();
        for (i, want) in texts.iter().enumerate() {
            assert_eq!(text.value(i), want, "row {i}");
        }
        for (name, bit) in [("preflush", flags::PREFLUSH), ("fua", flags::FUA), ("sync", flags::SYNC), ("meta", flags::META), ("readahead", flags::READAHEAD)] {
            let col = batch.column_by_name(name).unwrap().as_any().downcast_ref::<BooleanArray>().unwrap();
            assert_eq!(col.len(), n);
            for (i, f) in row_flags.iter().enumerate() {
                assert_eq!(col.value(i), f & bit != 0, "{name} row {i}");
            }
        }
    }
}
