//! Links the `mailjar` binary with packed relative relocations (`DT_RELR`)
//! on Linux with glibc: a position-independent binary of this size carries
//! about 21,000 relative relocations, whose 500 KiB table (`.rela.dyn`) the
//! loader reads at every start and which then stays resident. Packed, the
//! table is a few hundred bytes: about 0.5 MiB less idle RSS, and ASLR kept.
//! GNU ld 2.38+ and lld 15+ know the option; glibc 2.36+ loads it (ld adds
//! the `GLIBC_ABI_DT_RELR` version need only when the C library has it).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=MAILJAR_NO_RELR");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" && std::env::var_os("MAILJAR_NO_RELR").is_none() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
