"""The VM lab: the same lab run inside a small qemu guest with a kernel of the user's
choice (``sqlwa run --vm``), for filesystems and layers the host's kernel lacks, other
kernel versions, and block-level runs without root on the host.

:mod:`~sqlwa.vm.kernel` fetches and prepares the kernel, :mod:`~sqlwa.vm.initramfs`
builds the guest's init, :mod:`~sqlwa.vm.machine` runs qemu, and
:mod:`~sqlwa.vm.guest` is what runs inside: the measuring half of a lab run
(:mod:`sqlwa.measure.lab_capture`); the host analyses (:func:`sqlwa.measure.report.analyse_capture`).
"""
