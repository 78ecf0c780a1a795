"""Durability (``sqlwa crash``): what a power cut at any moment of a run would leave.

The run's device writes are recorded with their data by device-mapper's ``log-writes``
target under the lab filesystem (:mod:`sqlwa.lab.devmapper`), the engine marking the log
after every acknowledged commit. :mod:`.writelog` reads that log, :mod:`.states` draws
crash states from it (the image at every flush, seeded subsets of the writes a volatile
cache held, torn writes), :mod:`.replay` builds each state's image, :mod:`.verdict`
mounts it and asks SQLite what survived, compared with the database as of each commit
(:mod:`.reference`), and :mod:`.explore` runs it all into summary.json's ``durability``.
"""
