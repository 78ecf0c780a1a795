"""Results: the files of one run directory (:mod:`.rundir`), the sweep's results store
(:mod:`.store`), the regression gate (:mod:`.check`) and comparisons (:mod:`.compare`)."""
