//! sqlwa's workload engine. See `API.md` beside this crate for the contract the
//! Python layer relies on.
//! (skeleton: being implemented)
