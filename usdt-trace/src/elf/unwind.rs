//! What in an object says that something may unwind through its functions' frames: the
//! hazard that decides whether a function's end may be a return probe.
//!
//! A return probe rewrites the return address; an unwinder that walks the frame (a C++
//! exception, a Rust panic, a forced unwind) finds no frame information for the kernel's
//! trampoline there and terminates the program. Whether one can is visible in the object:
//! exception tables, the unwinder's entry points and personality routines it defines or
//! imports, Rust's panic machinery. Pure.

use object::elf;
use object::read::elf::{FileHeader, Sym};
use object::Endianness;

/// Why a library's functions are not all given return probes even when nothing in it unwinds:
/// a C++ program that loads it may pass a callback that throws, and catch the exception above
/// the library's frame (a C library calling back into C++ that throws: std::terminate under a
/// return probe). A program's own frames have no such catcher above them: only its own code
/// (which has no exception tables) and the C library's start code call into it.
pub const LIBRARY_UNWINDS: &str = "a shared library: a program that loads it may throw C++ exceptions through its functions (from a callback it passes) and catch them above";

/// Symbols whose presence (defined or imported) says that exceptions, panics or forced
/// unwinds may pass through the object's frames: the throw and resume entry points of the
/// unwinder, C++'s throw, the personality routines that run landing pads, Rust's panic.
const UNWINDERS: [&str; 12] = [
    "__cxa_throw",
    "__cxa_rethrow",
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_Resume_or_Rethrow",
    "_Unwind_ForcedUnwind",
    "__gxx_personality_v0",
    "__gcc_personality_v0",
    "rust_eh_personality",
    "__rust_start_panic",
    "rust_panic",
    "__cxa_begin_catch",
];

/// What in the object says that something may unwind through its frames, or None. A return
/// probe rewrites the return address: an unwinder that meets it finds no frame information
/// for the kernel's trampoline and terminates the program (a `longjmp` is different: the
/// kernel drops the return instances it skipped, checked by the stack pointer).
pub fn evidence<Elf: FileHeader<Endian = Endianness>>(
    sections: &object::read::elf::SectionTable<'_, Elf>,
    endian: Endianness,
    data: &[u8],
) -> Option<String> {
    let has_section = |name: &[u8]| {
        sections
            .iter()
            .any(|s| sections.section_name(endian, s).is_ok_and(|n| n == name))
    };
    if has_section(b".gcc_except_table") {
        return Some("it has exception tables (.gcc_except_table): C++ exceptions or Rust panics unwind through its frames".into());
    }
    for kind in [elf::SHT_DYNSYM, elf::SHT_SYMTAB] {
        let Ok(symbols) = sections.symbols(endian, data, kind) else {
            continue;
        };
        for sym in symbols.iter() {
            let Ok(raw) = symbols.symbol_name(endian, sym) else {
                continue;
            };
            let base = raw.split(|&b| b == b'@').next().unwrap_or(raw);
            if let Some(n) = UNWINDERS.iter().find(|n| n.as_bytes() == base) {
                let how = if sym.st_shndx(endian) == elf::SHN_UNDEF {
                    "imports"
                } else {
                    "defines"
                };
                return Some(format!(
                    "it {how} {n}: exceptions or panics may unwind through its frames"
                ));
            }
        }
    }
    None
}
