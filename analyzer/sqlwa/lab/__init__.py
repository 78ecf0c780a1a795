"""The lab: a fresh filesystem on a loop device for every run (:mod:`.filesystem`),
filled to a level (:mod:`.fill`), its own journal and metadata located
(:mod:`.fslayout`), and what crashed runs left behind removed (:mod:`.cleanup`).
How it works and what it guarantees: docs/guide/device-level.md (the lab) and
docs/guide/phone-stack.md (its layers)."""
