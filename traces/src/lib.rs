//! blktrace-parse (skeleton: being implemented)
