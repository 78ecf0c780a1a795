"""Measuring: the workload engine (:mod:`.engine`), one run from request to output
files (:mod:`.runner`, at the place its target says: :mod:`.targets`; its capture analysed
by :mod:`.analyse` and written by :mod:`.report`), sweeps over many configurations
(:mod:`.matrix`) and the facts of the machine a run happened on (:mod:`.environment`)."""
