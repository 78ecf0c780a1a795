"""The capture: one tracefs instance per run recording block requests, the workload's
syscalls and the engine's markers on one timeline (:mod:`.tracing`), drained to the run's
trace.txt while the workload runs (:mod:`.drain`)."""
