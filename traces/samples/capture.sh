#!/usr/bin/env bash
# Captures the real ftrace samples in samples/ftrace-loop-ext4/ (run as root):
# a private tracefs instance with block tracepoints, a few syscall tracepoints (filtered to
# the workload's pid) and trace_marker; I/O from a Python workload on ext4 on a loop
# device backed by an image file in /tmp. Everything it creates is removed on exit,
# on error and on Ctrl-C.
set -euo pipefail
out=${1:-$(dirname "$0")/ftrace-loop-ext4}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tracefs=/sys/kernel/tracing
tag="blktrace_parse_sample_$$_$RANDOM"
inst="$tracefs/instances/$tag"
img="/tmp/$tag.img"
mnt="/tmp/$tag.mnt"
loop=""

cleanup() {
    set +e
    [ -d "$inst" ] && { echo 0 > "$inst/tracing_on"; echo 0 > "$inst/events/enable"; rmdir "$inst"; }
    mountpoint -q "$mnt" && umount "$mnt"
    [ -d "$mnt" ] && rmdir "$mnt"
    [ -n "$loop" ] && losetup -d "$loop"
    rm -f "$img"
}
trap cleanup EXIT INT TERM

truncate -s 64M "$img"
mkfs.ext4 -q -F "$img"
loop=$(losetup -f --show "$img")
mkdir "$mnt"
mount "$loop" "$mnt"
mkdir "$inst"
echo 4096 > "$inst/buffer_size_kb"
for ev in block_rq_issue block_rq_complete block_rq_insert block_bio_queue block_getrq block_bio_backmerge \
          block_bio_frontmerge block_split block_bio_remap block_plug block_unplug block_bio_complete; do
    echo 1 > "$inst/events/block/$ev/enable"
done
# The workload waits for "go" on stdin so its pid can be put in the syscall filters first.
python3 - "$mnt" "$inst/trace_marker" <<'PY' &
import os, sys
mnt, marker = sys.argv[1], sys.argv[2]
with open(os.path.join(mnt, ".pid"), "w") as f:
    f.write(str(os.getpid()))
while not os.path.exists(os.path.join(mnt, ".go")):
    pass
m = os.open(marker, os.O_WRONLY)
def mark(s): os.write(m, ("sqlwa " + s + "\n").encode())
mark("run_begin pid=%d tid=%d t=0" % (os.getpid(), os.getpid()))
path = os.path.join(mnt, "test.db")
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
for i in range(3):
    mark("txn_begin i=%d warmup=0 t=0" % i)
    os.pwrite(fd, b"x" * 4096, i * 4096)
    os.write(fd, b"y" * 512)
    os.fsync(fd)
    os.fdatasync(fd)
    mark("txn_end i=%d t=0" % i)
os.ftruncate(fd, 4096)
os.fsync(fd)
os.close(fd)
os.unlink(path)
os.sync()
mark("run_end t=0")
PY
worker=$!
while [ ! -s "$mnt/.pid" ]; do sleep 0.05; done
pid=$(cat "$mnt/.pid")
for sc in fsync fdatasync pwrite64 write ftruncate unlink unlinkat openat sync_file_range; do
    for dir in enter exit; do
        ev="$inst/events/syscalls/sys_${dir}_$sc"
        [ -d "$ev" ] || continue
        echo "common_pid == $pid" > "$ev/filter"
        echo 1 > "$ev/enable"
    done
done
echo 1 > "$inst/tracing_on"
touch "$mnt/.go"
wait "$worker"
sync
sleep 0.5
echo 0 > "$inst/tracing_on"
cat "$inst/trace" > "$out/trace.txt"
echo 0 > "$inst/options/irq-info"
echo 1 > "$inst/options/record-tgid"
cat "$inst/trace" > "$out/trace-tgid-noirq.txt"
echo "kernel $(uname -r), loop device $loop ($(cat /sys/block/$(basename "$loop")/dev))" > "$out/CAPTURED"
wc -l "$out"/*.txt
