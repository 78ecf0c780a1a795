//! A small blktrace binary writer, for tests and the benchmark generator: it produces the
//! records the kernel would (header + payload), in either byte order.
use crate::binary::{ta, tn, MAGIC};
use crate::rwbs::category;

#[derive(Clone, Debug, Default)]
/// One blktrace record as the kernel writes it (`struct blk_io_trace` and its payload), for
/// [`write_record`].
pub struct RawRecord {
    /// Per-CPU sequence number.
    pub sequence: u32,
    /// Time in ns.
    pub time: u64,
    /// First sector.
    pub sector: u64,
    /// Bytes covered.
    pub bytes: u32,
    /// Full action word: `__BLK_TA_*` | category bits << 16.
    pub action: u32,
    /// Process id.
    pub pid: u32,
    /// Kernel dev_t encoding: major << 20 | minor.
    pub device: u32,
    /// CPU that recorded it.
    pub cpu: u32,
    /// Error code.
    pub error: u16,
    /// Payload (process name, remap, message, cgroup id).
    pub pdu: Vec<u8>,
}

/// The kernel's dev_t encoding of a device number, as [`RawRecord::device`] holds it.
pub fn dev(major: u32, minor: u32) -> u32 {
    major << 20 | minor
}

/// Appends one record to `out` in the given byte order; `version` is normally 7.
pub fn write_record(out: &mut Vec<u8>, r: &RawRecord, big_endian: bool, version: u32) {
    let u32b = |v: u32| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u64b = |v: u64| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    let u16b = |v: u16| {
        if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    };
    out.extend_from_slice(&u32b(MAGIC | version));
    out.extend_from_slice(&u32b(r.sequence));
    out.extend_from_slice(&u64b(r.time));
    out.extend_from_slice(&u64b(r.sector));
    out.extend_from_slice(&u32b(r.bytes));
    out.extend_from_slice(&u32b(r.action));
    out.extend_from_slice(&u32b(r.pid));
    out.extend_from_slice(&u32b(r.device));
    out.extend_from_slice(&u32b(r.cpu));
    out.extend_from_slice(&u16b(r.error));
    out.extend_from_slice(&u16b(r.pdu.len() as u16));
    out.extend_from_slice(&r.pdu);
}

/// The action word of a record: a [`ta`] code with category bits (from [`category`]).
pub fn act(ta_code: u32, categories: u32) -> u32 {
    ta_code | categories << 16
}

/// A process-notify record naming `pid`.
pub fn process_notify(time: u64, pid: u32, cpu: u32, device: u32, comm: &str) -> RawRecord {
    let mut pdu = comm.as_bytes().to_vec();
    pdu.resize(16, 0);
    RawRecord {
        time,
        pid,
        cpu,
        device,
        action: act(tn::PROCESS, category::NOTIFY),
        pdu,
        ..Default::default()
    }
}

/// A message record (`blk_add_trace_msg`).
pub fn message(time: u64, pid: u32, cpu: u32, device: u32, text: &str) -> RawRecord {
    RawRecord {
        time,
        pid,
        cpu,
        device,
        action: act(tn::MESSAGE, category::NOTIFY),
        pdu: text.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// Remap payload: big-endian device_from, device_to, sector_from.
pub fn remap_pdu(from_dev: u32, to_dev: u32, from_sector: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(16);
    p.extend_from_slice(&from_dev.to_be_bytes());
    p.extend_from_slice(&to_dev.to_be_bytes());
    p.extend_from_slice(&from_sector.to_be_bytes());
    p
}

/// Split target sector or unplug depth: one big-endian u64.
pub fn be64_pdu(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// Prefixes a payload with a cgroup id and sets the cgroup bit on the action.
pub fn with_cgroup(mut r: RawRecord, cgroup_id: u64, big_endian: bool) -> RawRecord {
    let mut pdu = if big_endian {
        cgroup_id.to_be_bytes()
    } else {
        cgroup_id.to_le_bytes()
    }
    .to_vec();
    pdu.extend_from_slice(&r.pdu);
    r.pdu = pdu;
    r.action |= ta::CGROUP;
    r
}
