"""The stand-in device's ``perfetto``: its command line client and its ``traced``, for the
subset of Perfetto that sqlwa uses on a phone (tests/standin_device.py runs both inside
the device's root).

On a phone the ``perfetto`` command is an unprivileged client (run by the shell user)
that asks the privileged ``traced``/``traced_probes`` over a UNIX socket to record; this
copies that split:

- ``standin_perfetto.py traced --socket PATH --tracing DIR --workdir DIR`` runs as root
  in the device: it listens on ``PATH`` (mode 0666: any user may ask, as the consumer
  socket's), and per session parses the client's TraceConfig text with Perfetto's own
  protos (``perfetto_trace_pb2.TraceConfig``, ``google.protobuf.text_format``), sets the
  tracing directory's ``buffer_size_kb`` (FtraceConfig's, per CPU) and ``trace_clock``
  (``boot``, what traced prefers), enables each listed ftrace event the kernel has (the
  rest are skipped, as traced skips them), narrows ``raw_syscalls`` to the config's
  ``syscall_events`` with a filter on the syscall id, turns tracing on and answers
  ``started``. On the client's ``stop``, or after ``duration_ms``, it turns tracing off,
  reads the ring buffer's text and answers with it and with it as a Perfetto trace:
  ``system_info``, ``ftrace_stats`` at both ends (the ring's overrun per CPU: sqlwa's
  lost events), the process tree and per-CPU ``FtraceEventBundle``s of typed block,
  ``print`` and ``sys_enter``/``sys_exit`` events, written by sqlwa's own exporter
  (:class:`sqlwa.views.perfetto_export.Writer`) from sqlwa's parse of that text (its
  ``raw_syscalls`` lines renamed first, :func:`named_syscalls`, as sqlwa's text parser
  reads the per-syscall tracepoints). One session at a time, where the real traced
  would run several; no atrace categories, no process_stats data source.
- ``standin_perfetto.py client [--txt] -c FILE|- -o OUT|- [--background|--background-wait]``
  is ``/system/bin/perfetto``. As the real one (src/perfetto_cmd/perfetto_cmd.cc) it
  reads and checks the config and opens ``OUT`` before it detaches; ``--background``
  forks (src/base/utils.cc, Daemonize): the parent prints the child's PID and a newline
  on stdout and exits 0 at once, the child calls setsid, changes to ``/``, puts
  /dev/null on stdin, stdout and stderr and goes on to record. ``--background-wait``
  makes the parent wait until the child has started recording (exit 0) or failed (1).
  SIGTERM or SIGINT stops the recording; the client then writes the trace to ``OUT``
  and the raw text beside it, ``OUT.standin.txt`` (the truth tests tally), and exits 0.

The protocol between the two is one JSON line each way per step, then, for the trace,
the two payloads' bytes whose lengths the JSON line gave.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

DEFAULT_BUFFER_KB = 2048  # per CPU, when the config gives no buffer_size_kb


# ---------------------------------------------------------------- traced


class Traced:
    """The tracing service: one session at a time on one tracing directory."""

    def __init__(self, tracing: Path, workdir: Path) -> None:
        self.tracing = tracing
        self.workdir = workdir
        self.lock = threading.Lock()
        self.busy = False
        self.start_stats: dict[int, dict[str, str]] = {}

    def write(self, name: str, value: str) -> None:
        (self.tracing / name).write_text(value)

    def event_dirs(self, spec: str) -> list[Path]:
        """The kernel's event directories a config's ``ftrace_events`` entry names
        ("group/name", "group/*" or a bare "name"); [] where the kernel has none."""
        events = self.tracing / "events"
        group, _, name = spec.rpartition("/")
        if not group:
            return sorted(p.parent for p in events.glob(f"*/{name}/enable"))
        if name == "*":
            return sorted(p.parent for p in (events / group).glob("*/enable"))
        return [events / group / name] if (events / group / name / "enable").exists() else []

    def start(self, config_text: str) -> tuple[list[Path], float | None]:
        """Set the tracing directory up for ``config_text``; (the events enabled, the
        session's duration in seconds or None)."""
        from google.protobuf import text_format
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

        from sqlwa.analysis import syscalls

        config = text_format.Parse(config_text, pb.TraceConfig())
        ftrace = [ds.config.ftrace_config for ds in config.data_sources if ds.config.name == "linux.ftrace"]
        self.write("tracing_on", "0")
        self.write("trace", "")
        clocks = (self.tracing / "trace_clock").read_text().replace("[", "").replace("]", "").split()
        if "boot" in clocks:
            self.write("trace_clock", "boot")
        size = max((f.buffer_size_kb for f in ftrace), default=0) or DEFAULT_BUFFER_KB
        self.write("buffer_size_kb", str(size))
        enabled: list[Path] = []
        for spec in dict.fromkeys(e for f in ftrace for e in f.ftrace_events):
            enabled += self.event_dirs(spec)
        wanted = [name.removeprefix("sys_") for f in ftrace for name in f.syscall_events]
        numbers = syscalls.numbers_by_name(os.uname().machine) if os.uname().machine in syscalls.NUMBERS else {}
        ids = sorted({numbers[name] for name in wanted if name in numbers})
        for event in enabled:
            if event.parent.name == "raw_syscalls" and ids:
                (event / "filter").write_text(" || ".join(f"id == {i}" for i in ids))
            (event / "enable").write_text("1")
        self.start_stats = self.cpu_stats()
        self.write("tracing_on", "1")
        return enabled, (config.duration_ms / 1000 if config.duration_ms else None)

    def cpu_stats(self) -> dict[int, dict[str, str]]:
        """Each CPU's ring statistics (``per_cpu/cpuN/stats``: entries, overrun, …)."""
        stats = {}
        for path in sorted((self.tracing / "per_cpu").glob("cpu*/stats")):
            lines = (line.partition(":") for line in path.read_text().splitlines())
            stats[int(path.parent.name[3:])] = {k.strip(): v.strip() for k, _, v in lines}
        return stats

    def stop(self, enabled: list[Path]) -> tuple[bytes, bytes]:
        """Tracing off, the ring read and reset; (the Perfetto trace, the raw text)."""
        import io

        from sqlwa.analysis import traceparse
        from sqlwa.views.perfetto_export import Writer

        self.write("tracing_on", "0")
        text = (self.tracing / "trace").read_bytes()
        end_stats = self.cpu_stats()
        for event in enabled:
            (event / "enable").write_text("0")
            if event.parent.name == "raw_syscalls":
                (event / "filter").write_text("0")
        self.write("trace", "")
        raw = self.workdir / f"session-{os.getpid()}-{time.monotonic_ns()}.txt"
        raw.write_bytes(named_syscalls(text, os.uname().machine))
        try:
            events, _ = traceparse.parse(raw, lenient=True)
        finally:
            raw.unlink()
        out = io.BytesIO()
        writer = Writer(out)
        uname = os.uname()
        writer.system_info(uname.machine, uname.release)
        write_stats(writer, "START_OF_TRACE", self.start_stats)
        writer.process_tree(events, {})
        writer.ftrace(events, uname.machine)
        write_stats(writer, "END_OF_TRACE", end_stats)
        return out.getvalue(), text

    def serve(self, conn: socket.socket) -> None:
        """One client's session."""
        with conn, conn.makefile("rwb") as stream:
            request = json.loads(stream.readline() or b"{}")
            with self.lock:
                refused = "another session is recording" if self.busy else None
                self.busy = self.busy or refused is None
            if request.get("op") != "start" or refused:
                reply(stream, {"error": refused or "expected a start request"})
                return
            try:
                try:
                    enabled, duration = self.start(request["config"])
                except Exception as exc:  # the client hears why, as perfetto's does
                    reply(stream, {"error": f"could not start the session: {exc}"})
                    return
                reply(stream, {"started": [f"{e.parent.name}/{e.name}" for e in enabled]})
                stop = threading.Event()
                watcher = threading.Thread(target=lambda: (stream.readline(), stop.set()), daemon=True)
                watcher.start()
                stop.wait(duration)
                trace, text = self.stop(enabled)
                try:
                    reply(stream, {"trace": len(trace), "text": len(text)})
                    stream.write(trace)
                    stream.write(text)
                    stream.flush()
                except OSError:
                    pass  # the client went (SIGKILL): the session's data goes with it
            finally:
                with self.lock:
                    self.busy = False


RAW_SYSCALL = re.compile(
    rb"^(?P<head>.*?\[\d+\].*? \d+\.\d+: )sys_(?P<dir>enter|exit): NR (?P<nr>-?\d+) "
    rb"(?:\((?P<args>[^)]*)\)|= (?P<ret>-?\d+))$",
    re.M,
)


def named_syscalls(text: bytes, machine: str) -> bytes:
    """``raw_syscalls`` lines (``sys_enter: NR 74 (3, …)``, ``sys_exit: NR 74 = 0``) in
    the syscall tracepoints' format (``sys_enter_fsync: a0: 0x3, …``, ``sys_exit_fsync:
    0x0``), the one sqlwa's text parser reads, in place, so the events keep their order;
    a number the machine's table lacks is left as it is (Perfetto's writer skips it)."""
    from sqlwa.analysis import syscalls

    names = syscalls.NUMBERS.get(machine, {})

    def rename(m: re.Match) -> bytes:
        name = names.get(int(m["nr"]))
        if name is None:
            return m[0]
        head = m["head"] + f"sys_{m['dir'].decode()}_{name}: ".encode()
        if m["dir"] == b"enter":
            args = [a.strip().decode() for a in m["args"].split(b",") if a.strip()]
            return head + ", ".join(f"a{i}: 0x{int(a, 16):x}" for i, a in enumerate(args)).encode()
        return head + f"0x{int(m['ret']) & (1 << 64) - 1:x}".encode()

    return RAW_SYSCALL.sub(rename, text)


STATS_FIELDS = {  # FtraceCpuStats field: the kernel's name in per_cpu/cpuN/stats
    "entries": "entries",
    "overrun": "overrun",
    "commit_overrun": "commit overrun",
    "bytes_read": "bytes",
    "dropped_events": "dropped events",
    "read_events": "read events",
}


def write_stats(writer, phase: str, stats: dict[int, dict[str, str]]) -> None:
    """An ``ftrace_stats`` packet, as traced writes one at each end of the session: the
    ring's overrun and dropped events per CPU are what sqlwa reports as losses."""
    packet = writer.packet()
    packet.ftrace_stats.phase = getattr(writer.pb.FtraceStats, phase)
    for cpu, values in stats.items():
        cpu_stats = packet.ftrace_stats.cpu_stats.add()
        cpu_stats.cpu = cpu
        for field, name in STATS_FIELDS.items():
            setattr(cpu_stats, field, int(values.get(name, "0").split()[0]))
        for field, name in (("oldest_event_ts", "oldest event ts"), ("now_ts", "now ts")):
            setattr(cpu_stats, field, float(values.get(name, "0") or 0))
    writer.write(packet)


def reply(stream, message: dict) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def traced_main(args: argparse.Namespace) -> int:
    service = Traced(Path(args.tracing), Path(args.workdir))
    path = Path(args.socket)
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o666)
    server.listen(8)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print("traced: listening", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=service.serve, args=(conn,), daemon=True).start()


# ---------------------------------------------------------------- the perfetto client


def client_main(args: argparse.Namespace) -> int:
    from google.protobuf import text_format
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    if not args.config:
        print("perfetto: either a config file (-c) or a config on stdin (-c -) is needed", file=sys.stderr)
        return 1
    if not args.txt:
        print("perfetto (stand-in): only text configs (--txt) are supported", file=sys.stderr)
        return 1
    try:
        text = sys.stdin.read() if args.config == "-" else Path(args.config).read_text()
    except OSError as exc:
        print(f"perfetto: could not open {args.config}: {exc.strerror}", file=sys.stderr)
        return 1
    try:
        text_format.Parse(text, pb.TraceConfig())
    except text_format.ParseError as exc:
        print(f"perfetto: the config does not parse: {exc}", file=sys.stderr)
        return 1
    if not args.out:
        print("perfetto: an output file (-o) is needed", file=sys.stderr)
        return 1
    try:
        out = sys.stdout.buffer if args.out == "-" else open(args.out, "wb", opener=private_opener)
    except OSError as exc:
        print(f"perfetto: could not open {args.out}: {exc.strerror}", file=sys.stderr)
        return 1
    stop_requested = threading.Event()
    ready_w = None
    if args.background or args.background_wait:
        ready_r, ready_w = os.pipe() if args.background_wait else (None, None)
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            if ready_r is None:
                os._exit(0)
            os.close(ready_w)
            answer = os.read(ready_r, 1)
            os._exit(0 if answer == b"1" else 1)
        if ready_r is not None:
            os.close(ready_r)
        os.setsid()
        os.chdir("/")
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop_requested.set())
    return record(args, text, out, stop_requested, ready_w)


def private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def record(args: argparse.Namespace, text: str, out, stop_requested: threading.Event, ready_w: int | None) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(args.socket)
    except OSError as exc:
        print(f"perfetto: could not connect to the tracing service: {exc.strerror}", file=sys.stderr)
        return 1
    stream = conn.makefile("rwb")
    reply(stream, {"op": "start", "config": text})
    answer = json.loads(stream.readline() or b'{"error": "the tracing service hung up"}')
    if ready_w is not None:
        os.write(ready_w, b"1" if "started" in answer else b"0")
        os.close(ready_w)
    if "error" in answer:
        print(f"perfetto: {answer['error']}", file=sys.stderr)
        return 1
    print(f"perfetto: recording, {len(answer['started'])} ftrace events enabled", file=sys.stderr)
    sent_stop = False
    conn.settimeout(0.1)
    header = b""
    while not header.endswith(b"\n"):
        if stop_requested.is_set() and not sent_stop:
            conn.sendall(b'{"op": "stop"}\n')
            sent_stop = True
        try:
            chunk = conn.recv(1)
        except TimeoutError:
            continue
        if not chunk:
            print("perfetto: the tracing service hung up", file=sys.stderr)
            return 1
        header += chunk
    conn.settimeout(None)
    sizes = json.loads(header)
    trace, raw = read_exact(conn, sizes["trace"]), read_exact(conn, sizes["text"])
    out.write(trace)
    out.flush()
    if args.out != "-":
        out.close()
        with open(args.out + ".standin.txt", "wb", opener=private_opener) as side:
            side.write(raw)
    print(f"perfetto: wrote {len(trace)} bytes", file=sys.stderr)
    return 0


def read_exact(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = conn.recv(min(1 << 20, n - len(data)))
        if not chunk:
            raise EOFError("the tracing service hung up mid-trace")
        data += chunk
    return bytes(data)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="standin_perfetto.py")
    sub = parser.add_subparsers(dest="role", required=True)
    traced = sub.add_parser("traced")
    traced.add_argument("--socket", required=True)
    traced.add_argument("--tracing", required=True)
    traced.add_argument("--workdir", required=True)
    client = sub.add_parser("client", prog="perfetto")
    client.add_argument("--socket", required=True)
    client.add_argument("--txt", action="store_true")
    client.add_argument("-c", "--config")
    client.add_argument("-o", "--out")
    client.add_argument("--background", "-d", action="store_true")
    client.add_argument("--background-wait", "-D", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return traced_main(args) if args.role == "traced" else client_main(args)


if __name__ == "__main__":
    sys.exit(main())
