#!/bin/sh
# The VM lab guest's init (PID 1 in the initramfs sqlwa.vm.initramfs builds). It mounts
# the host's root read-only over 9p under a RAM overlay, so the host's tools, Python and
# sqlwa run unchanged with the guest's kernel, the guest kernel's modules over
# /lib/modules, the run's control directory at /run/sqlwa-vm and its output directory at
# its host path; runs /run/sqlwa-vm/guest.sh there; and powers off. Every line it prints
# reaches the host on the serial console; "sqlwa-vm:" lines are for the host to read.
export PATH=/bin
say() { echo "sqlwa-vm: $*"; }
fail() { say "init failed: $*"; poweroff -f; }

mount -t proc proc /proc && mount -t sysfs sys /sys && mount -t devtmpfs dev /dev || fail "proc, sys or dev"
say "kernel $(cut -d' ' -f1 /proc/uptime)"  # the kernel reached init: a boot that hangs later is init's
for module in $(cat /modules/order); do insmod "/modules/$module" || fail "insmod $module"; done
P9="trans=virtio,version=9p2000.L,msize=512000"
mount -t 9p -o "$P9" ctl /ctl || fail "the control share"
. /ctl/guest.env  # MODULES_DIR OUT_DIR TMP_SIZE, quoted by the host
mount -t 9p -o "$P9,ro,cache=loose" host /ro || fail "the host's root"
mount -t tmpfs -o mode=755 upper /rw && mkdir /rw/upper /rw/work || fail "the overlay's RAM"
mount -t overlay -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work root /root || fail "the overlay"

R=/root
mount -t proc proc $R/proc && mount -t sysfs sys $R/sys && mount -t devtmpfs dev $R/dev || fail "proc, sys or dev inside"
mount -t tracefs tracefs $R/sys/kernel/tracing || fail "tracefs"
# The host's /tmp stays visible (a scenario or kernel may be there; writes stay in the
# overlay's RAM); the lab makes its image in a tmpfs of its own (guest.sh: TMPDIR).
mount -t tmpfs -o mode=755 run $R/run && mkdir $R/run/sqlwa-tmp || fail "/run"
mount -t tmpfs -o "size=$TMP_SIZE,mode=1777" labtmp $R/run/sqlwa-tmp || fail "the lab's tmpfs"
mkdir -p $R/dev/shm $R/dev/pts $R/lib/modules $R/run/sqlwa-vm "$R$OUT_DIR" || fail "mount points"
mount -t tmpfs -o mode=1777 shm $R/dev/shm && mount -t devpts devpts $R/dev/pts || fail "/dev/shm or /dev/pts"
mount --bind "$R$MODULES_DIR" $R/lib/modules || fail "the guest kernel's modules"
mount --bind /ctl $R/run/sqlwa-vm || fail "the control directory inside"
mount -t 9p -o "$P9" out "$R$OUT_DIR" || fail "the output share"
# The kernel loads modules (a filesystem at mount, a cipher at first use) with this
# program, in init's root: let it run the host's modprobe in the guest's view.
echo /bin/modprobe-inside > /proc/sys/kernel/modprobe

say "booted $(cut -d' ' -f1 /proc/uptime)"
chroot $R /bin/sh /run/sqlwa-vm/guest.sh
say "exit $?"
poweroff -f
