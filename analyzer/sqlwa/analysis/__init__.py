"""Analysis: traces into one event table (:mod:`.traceparse`), cut into commit windows
(:mod:`.windows`), block bytes attributed to their cause (:mod:`.attribution`), derived
figures (:mod:`.metrics`) and the run's summary.json (:mod:`.summary`). Pure functions of
their inputs: nothing here touches the OS."""
