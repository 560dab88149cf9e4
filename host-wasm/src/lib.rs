//! WebAssembly bindings of mailjar-core.
