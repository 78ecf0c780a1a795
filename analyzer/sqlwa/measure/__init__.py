"""Measuring: the workload engine (:mod:`.engine`), one run from request to output
files (:mod:`.runner`), sweeps over many configurations (:mod:`.matrix`) and the facts
of the machine a run happened on (:mod:`.environment`)."""
