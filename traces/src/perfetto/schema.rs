//! Where each field the reader needs lies: the field numbers of Perfetto's published
//! trace protos, looked up by name in their descriptor (`traces/proto/perfetto_trace.desc`,
//! written from the pinned `perfetto` package by `traces/proto/regenerate.py`), so no
//! number is typed by hand. The 600-odd ftrace event types are known by their field in
//! `FtraceEvent`'s oneof; any of them can be printed as `name=value` pairs.
use prost_reflect::{DescriptorPool, MessageDescriptor};

static DESCRIPTOR_SET: &[u8] = include_bytes!("../../proto/perfetto_trace.desc");

/// How a block event's tracefs line is laid out (the kernel's `TP_printk` of each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockLine {
    /// block_rq_issue, block_rq_insert: `dev rwbs bytes (cmd) sector + n [comm]`
    Request,
    /// block_rq_complete: `dev rwbs (cmd) sector + n [error]`
    RequestComplete,
    /// block_rq_requeue: as a completion, its error bracket from `errors`
    Requeue,
    /// block_bio_queue/backmerge/frontmerge/bounce, block_getrq: `dev rwbs sector + n [comm]`
    Bio,
    /// block_bio_complete: `dev rwbs sector + n [error]`
    BioComplete,
    /// block_bio_remap, block_rq_remap: `dev rwbs sector + n <- (old dev) old sector`
    Remap,
    /// block_split: `dev rwbs sector / new sector [comm]`
    Split,
}

impl BlockLine {
    fn of(event: &str) -> Option<BlockLine> {
        Some(match event {
            "block_rq_issue" | "block_rq_insert" => BlockLine::Request,
            "block_rq_complete" => BlockLine::RequestComplete,
            "block_rq_requeue" => BlockLine::Requeue,
            "block_bio_queue"
            | "block_bio_backmerge"
            | "block_bio_frontmerge"
            | "block_bio_bounce"
            | "block_getrq" => BlockLine::Bio,
            "block_bio_complete" => BlockLine::BioComplete,
            "block_bio_remap" | "block_rq_remap" => BlockLine::Remap,
            "block_split" => BlockLine::Split,
            _ => return None,
        })
    }
}

/// The numbers of a block event's fields (absent where its message has no such field).
#[derive(Clone, Debug, Default)]
pub struct BlockFields {
    pub dev: Option<u32>,
    pub sector: Option<u32>,
    pub nr_sector: Option<u32>,
    pub bytes: Option<u32>,
    pub rwbs: Option<u32>,
    pub cmd: Option<u32>,
    pub comm: Option<u32>,
    pub error: Option<u32>,
    pub errors: Option<u32>,
    pub old_dev: Option<u32>,
    pub old_sector: Option<u32>,
    pub new_sector: Option<u32>,
}

/// What the reader does with an ftrace event of a type.
#[derive(Clone, Debug)]
pub enum Shape {
    Block(BlockLine, BlockFields),
    /// `print` (trace_marker writes): `buf`
    Print {
        buf: u32,
    },
    /// sys_enter (`values`: its `args`) and sys_exit (`values`: its `ret`).
    Syscall {
        enter: bool,
        id: u32,
        values: u32,
    },
    /// task_newtask (`comm`) and task_rename (`newcomm`) name a pid.
    Naming {
        pid: u32,
        name: u32,
    },
    /// Any other event: kept as `name=value` pairs.
    Other,
}

#[derive(Clone, Debug)]
pub struct EventType {
    pub name: String,
    pub shape: Shape,
    pub message: MessageDescriptor,
}

pub struct Schema {
    pub packet: PacketFields,
    pub bundle: BundleFields,
    pub compact: CompactFields,
    pub tree: TreeFields,
    pub stats: StatsFields,
    /// FtraceEvent's own fields: timestamp and pid.
    pub event_timestamp: u32,
    pub event_pid: u32,
    /// Indexed by the event's field number in FtraceEvent.
    events: Vec<Option<EventType>>,
}

pub struct PacketFields {
    pub ftrace_events: u32,
    pub process_tree: u32,
    pub ftrace_stats: u32,
    pub system_info: u32,
    pub compressed_packets: u32,
    pub utsname: u32,
    pub machine: u32,
}

pub struct BundleFields {
    pub cpu: u32,
    pub event: u32,
    pub lost_events: u32,
    pub compact_sched: u32,
}

pub struct CompactFields {
    pub intern_table: u32,
    pub switch_timestamp: u32,
    pub switch_prev_state: u32,
    pub switch_next_pid: u32,
    pub switch_next_prio: u32,
    pub switch_next_comm_index: u32,
    pub waking_timestamp: u32,
    pub waking_pid: u32,
    pub waking_target_cpu: u32,
    pub waking_prio: u32,
    pub waking_comm_index: u32,
}

pub struct TreeFields {
    pub processes: u32,
    pub threads: u32,
    pub process_pid: u32,
    pub process_cmdline: u32,
    pub thread_tid: u32,
    pub thread_name: u32,
}

pub struct StatsFields {
    pub phase: u32,
    pub cpu_stats: u32,
    pub cpu: u32,
    pub overrun: u32,
    pub dropped_events: u32,
}

/// FtraceStats.Phase.START_OF_TRACE
pub const START_OF_TRACE: u64 = 1;

impl Schema {
    pub fn load() -> Schema {
        let pool = DescriptorPool::decode(DESCRIPTOR_SET).expect("the vendored descriptor decodes");
        let message = |name: &str| {
            pool.get_message_by_name(&format!("perfetto.protos.{name}"))
                .unwrap_or_else(|| panic!("perfetto_trace.desc has no message {name}"))
        };
        let packet = message("TracePacket");
        let system_info = message("SystemInfo");
        let bundle = message("FtraceEventBundle");
        let compact = message("FtraceEventBundle.CompactSched");
        let process = message("ProcessTree.Process");
        let thread = message("ProcessTree.Thread");
        let stats = message("FtraceStats");
        let cpu_stats = message("FtraceCpuStats");
        let event = message("FtraceEvent");
        Schema {
            packet: PacketFields {
                ftrace_events: number(&packet, "ftrace_events"),
                process_tree: number(&packet, "process_tree"),
                ftrace_stats: number(&packet, "ftrace_stats"),
                system_info: number(&packet, "system_info"),
                compressed_packets: number(&packet, "compressed_packets"),
                utsname: number(&system_info, "utsname"),
                machine: number(&message("Utsname"), "machine"),
            },
            bundle: BundleFields {
                cpu: number(&bundle, "cpu"),
                event: number(&bundle, "event"),
                lost_events: number(&bundle, "lost_events"),
                compact_sched: number(&bundle, "compact_sched"),
            },
            compact: CompactFields {
                intern_table: number(&compact, "intern_table"),
                switch_timestamp: number(&compact, "switch_timestamp"),
                switch_prev_state: number(&compact, "switch_prev_state"),
                switch_next_pid: number(&compact, "switch_next_pid"),
                switch_next_prio: number(&compact, "switch_next_prio"),
                switch_next_comm_index: number(&compact, "switch_next_comm_index"),
                waking_timestamp: number(&compact, "waking_timestamp"),
                waking_pid: number(&compact, "waking_pid"),
                waking_target_cpu: number(&compact, "waking_target_cpu"),
                waking_prio: number(&compact, "waking_prio"),
                waking_comm_index: number(&compact, "waking_comm_index"),
            },
            tree: TreeFields {
                processes: number(&message("ProcessTree"), "processes"),
                threads: number(&message("ProcessTree"), "threads"),
                process_pid: number(&process, "pid"),
                process_cmdline: number(&process, "cmdline"),
                thread_tid: number(&thread, "tid"),
                thread_name: number(&thread, "name"),
            },
            stats: StatsFields {
                phase: number(&stats, "phase"),
                cpu_stats: number(&stats, "cpu_stats"),
                cpu: number(&cpu_stats, "cpu"),
                overrun: number(&cpu_stats, "overrun"),
                dropped_events: number(&cpu_stats, "dropped_events"),
            },
            event_timestamp: number(&event, "timestamp"),
            event_pid: number(&event, "pid"),
            events: event_types(&event),
        }
    }

    /// The event type of FtraceEvent's field `number`; None for its own fields and for
    /// numbers the protos do not know (a newer Perfetto's events: skipped).
    pub fn event_type(&self, number: u32) -> Option<&EventType> {
        self.events.get(number as usize)?.as_ref()
    }
}

fn event_types(event: &MessageDescriptor) -> Vec<Option<EventType>> {
    let mut types = Vec::new();
    for oneof in event.oneofs() {
        for field in oneof.fields() {
            let Some(message) = field.kind().as_message().cloned() else {
                continue;
            };
            let index = field.number() as usize;
            if types.len() <= index {
                types.resize(index + 1, None);
            }
            let name = field.name().to_string();
            let shape = shape(&name, &message);
            types[index] = Some(EventType {
                name,
                shape,
                message,
            });
        }
    }
    types
}

fn shape(event: &str, message: &MessageDescriptor) -> Shape {
    if let Some(line) = BlockLine::of(event) {
        let field = |name: &str| message.get_field_by_name(name).map(|f| f.number());
        return Shape::Block(
            line,
            BlockFields {
                dev: field("dev"),
                sector: field("sector"),
                nr_sector: field("nr_sector"),
                bytes: field("bytes"),
                rwbs: field("rwbs"),
                cmd: field("cmd"),
                comm: field("comm"),
                error: field("error"),
                errors: field("errors"),
                old_dev: field("old_dev"),
                old_sector: field("old_sector"),
                new_sector: field("new_sector"),
            },
        );
    }
    match event {
        "print" => Shape::Print {
            buf: number(message, "buf"),
        },
        "sys_enter" | "sys_exit" => Shape::Syscall {
            enter: event == "sys_enter",
            id: number(message, "id"),
            values: number(message, if event == "sys_enter" { "args" } else { "ret" }),
        },
        "task_newtask" => Shape::Naming {
            pid: number(message, "pid"),
            name: number(message, "comm"),
        },
        "task_rename" => Shape::Naming {
            pid: number(message, "pid"),
            name: number(message, "newcomm"),
        },
        _ => Shape::Other,
    }
}

fn number(message: &MessageDescriptor, field: &str) -> u32 {
    message
        .get_field_by_name(field)
        .unwrap_or_else(|| {
            panic!(
                "perfetto_trace.desc: {} has no field {field}",
                message.full_name()
            )
        })
        .number()
}
