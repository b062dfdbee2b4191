//! Function symbols → [`Functions`]: `.symtab`, else `.dynsym`, else Go's `.gopclntab`; each
//! function's bytes checked against its section before its first instruction is decoded.

use super::*;

/// Demangles a Rust (legacy or v0) or C++ (Itanium) symbol; anything else is returned as is.
pub fn demangle(raw: &str) -> String {
    // Rust's legacy mangling is Itanium-shaped (`_ZN...E`) and ends in a `17h<16 hex>E` hash,
    // which C++ names never carry; v0 starts with `_R`.
    let rust_legacy = raw.starts_with("_ZN") && {
        let core = raw.split('.').next().unwrap_or(raw);
        core.len() > 20
            && core.ends_with('E')
            && core[..core.len() - 1].ends_with(|c: char| c.is_ascii_hexdigit())
            && core[..core.len() - 1]
                .rfind("17h")
                .is_some_and(|i| core.len() - 1 - i == 19)
    };
    if raw.starts_with("_R") || rust_legacy {
        if let Ok(d) = rustc_demangle::try_demangle(raw) {
            return format!("{d:#}");
        }
    }
    if raw.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(raw.as_bytes()) {
            if let Ok(d) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return d;
            }
        }
    }
    raw.to_string()
}

/// The functions of an ELF object held in memory. Structural damage is an error; symbols
/// that cannot be probed (outside every executable segment, zero-sized) are skipped.
pub fn functions(data: &[u8]) -> Result<Functions, ElfError> {
    // The same checks as for notes: a file `list` rejects is rejected here with the same words.
    crate::elf::check_ident(data)?;
    match data[4] {
        elf::ELFCLASS32 => functions_class::<elf::FileHeader32<Endianness>>(data),
        _ => functions_class::<elf::FileHeader64<Endianness>>(data),
    }
}

/// Reads a file and lists its functions (see [`functions`]).
pub fn functions_file(path: &std::path::Path) -> Result<Functions, ElfError> {
    let bytes = std::fs::read(path).map_err(|source| ElfError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    functions(&bytes).map_err(|e| ElfError::InFile {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// What building a [`Function`] from a symbol needs of its object.
pub(super) struct Ctx<'a> {
    data: &'a [u8],
    loads: &'a [sites::Load],
    arch: Arch,
    go: bool,
    entry: u64,
}

impl Ctx<'_> {
    /// The function at `address` (`size` bytes), decoded; None outside every executable
    /// segment.
    pub(super) fn function(
        &self,
        name: String,
        symbol: String,
        table: SymbolTable,
        address: u64,
        size: u64,
    ) -> Option<Function> {
        let (data, arch) = (self.data, self.arch);
        let (seg, file_offset) = sites::probe_offset(self.loads, address).ok()?;
        let (insn, insn_bytes) = sites::classify_site(data, seg, file_offset, address, arch);
        // Never past the segment's file image.
        let end = seg.offset.saturating_add(seg.filesz);
        let stop = file_offset.saturating_add(size).min(end);
        let code = usize::try_from(file_offset)
            .ok()
            .zip(usize::try_from(stop).ok())
            .and_then(|(a, b)| data.get(a..b))
            .unwrap_or(&[]);
        let go_abi = self.go && gofunc::is_go_name(&name);
        // A cut-short image is not the whole function: its rets are not all known.
        let shape = if stop.saturating_sub(file_offset) == size && !go_abi {
            fnshape::shape(arch, code, address, file_offset)
        } else {
            Shape::default()
        };
        let go_layout = (go_abi && arch == Arch::X86_64).then(|| {
            let layout = gofunc::layout(code, address, file_offset);
            let entry_pc = address + (layout.entry_offset - file_offset);
            let (entry_insn, _) =
                sites::classify_site(data, seg, layout.entry_offset, entry_pc, arch);
            GoProbes { layout, entry_insn }
        });
        Some(Function {
            names: vec![name.clone()],
            name,
            symbol,
            table,
            address,
            size,
            file_offset,
            insn,
            insn_bytes,
            go_layout,
            shape,
            entry_point: address == self.entry,
            go_abi,
        })
    }
}

pub(super) fn functions_class<Elf: FileHeader<Endian = Endianness>>(
    data: &[u8],
) -> Result<Functions, ElfError> {
    let (header, endian, arch) = linked_header::<Elf>(data)?;
    let sections = header
        .sections(endian, data)
        .map_err(malformed("section header table"))?;
    let phdrs = header
        .program_headers(endian, data)
        .map_err(malformed("program header table"))?;
    let loads = sites::loads(phdrs, endian);
    // A program (not a library): a fixed-address executable, or a PIE, which names its
    // interpreter. Only a program's frames are known to have no catching frame above them
    // that another object's code could throw to.
    let program = header.e_type(endian) == elf::ET_EXEC
        || phdrs.iter().any(|p| p.p_type(endian) == elf::PT_INTERP);
    let buildinfo = sections.iter().find(|s| {
        sections
            .section_name(endian, s)
            .is_ok_and(|n| n == b".go.buildinfo")
    });
    let go = buildinfo.is_some();
    let go_version = buildinfo
        .and_then(|s| s.data(endian, data).ok())
        .and_then(gofunc::version);
    let entry: u64 = header.e_entry(endian).into();
    let has_symtab = sections
        .iter()
        .any(|s| s.sh_type(endian) == elf::SHT_SYMTAB);
    let mut ifuncs: Vec<String> = Vec::new();
    let ctx = Ctx {
        data,
        loads: &loads,
        arch,
        go,
        entry,
    };
    // Keyed by address: aliases collapse into one function.
    let mut by_addr: BTreeMap<u64, Function> = BTreeMap::new();
    for (table, kind) in [
        (SymbolTable::Dynsym, elf::SHT_DYNSYM),
        (SymbolTable::Symtab, elf::SHT_SYMTAB),
    ] {
        let Ok(symbols) = sections.symbols(endian, data, kind) else {
            continue;
        };
        for sym in symbols.iter() {
            if sym.st_type() == elf::STT_GNU_IFUNC && sym.st_shndx(endian) != elf::SHN_UNDEF {
                if let Ok(raw) = symbols.symbol_name(endian, sym) {
                    let n = demangle(&String::from_utf8_lossy(raw));
                    if !ifuncs.contains(&n) {
                        ifuncs.push(n);
                    }
                }
                continue;
            }
            if sym.st_type() != elf::STT_FUNC || sym.st_shndx(endian) == elf::SHN_UNDEF {
                continue;
            }
            let size: u64 = sym.st_size(endian).into();
            let address: u64 = sym.st_value(endian).into();
            if size == 0 || address == 0 {
                continue;
            }
            let Ok(raw) = symbols.symbol_name(endian, sym) else {
                continue;
            };
            let raw = String::from_utf8_lossy(raw);
            let name = demangle(&raw);
            if let Some(f) = by_addr.get_mut(&address) {
                if !f.names.contains(&name) {
                    f.names.push(name);
                }
                continue;
            }
            if let Some(f) = ctx.function(name, raw.into_owned(), table, address, size) {
                by_addr.insert(address, f);
            }
        }
    }
    // A stripped Go program still has the runtime's own function table.
    if go && !has_symtab {
        let text = sections
            .iter()
            .find(|s| {
                sections
                    .section_name(endian, s)
                    .is_ok_and(|n| n == b".text")
            })
            .map_or(0, |s| s.sh_addr(endian).into());
        let table = sections.iter().find(|s| {
            sections
                .section_name(endian, s)
                .is_ok_and(|n| n == b".gopclntab")
        });
        if let Some(bytes) = table.and_then(|s| s.data(endian, data).ok()) {
            for g in gopclntab::functions(bytes, text) {
                if g.size == 0 || by_addr.contains_key(&g.address) {
                    continue;
                }
                let symbol = g.name.clone();
                if let Some(f) =
                    ctx.function(g.name, symbol, SymbolTable::Gopclntab, g.address, g.size)
                {
                    by_addr.insert(g.address, f);
                }
            }
        }
    }
    let unwinds = if go {
        Some("a Go program: its runtime walks and moves goroutine stacks".to_string())
    } else {
        crate::elf::unwind::evidence(&sections, endian, data)
            .or_else(|| (!program).then(|| crate::elf::unwind::LIBRARY_UNWINDS.to_string()))
    };
    let mut functions: Vec<Function> = by_addr.into_values().collect();
    // A moved entry must not pass the start of another function (code that falls into the
    // next symbol): a call of that one would fire this one's entry.
    for i in 0..functions.len() {
        let next = functions.get(i + 1).map_or(u64::MAX, |g| g.address);
        let f = &mut functions[i];
        let past = |m: &Option<crate::elf::fnentry::Moved>| {
            m.is_some_and(|m| f.address.wrapping_add(m.offset - f.file_offset) >= next)
        };
        if past(&f.shape.entry.timing) {
            f.shape.entry.timing = None;
        }
        if past(&f.shape.entry.args) {
            f.shape.entry.args = None;
        }
    }
    Ok(Functions {
        arch: Some(arch),
        go,
        go_version,
        functions,
        ifuncs,
        has_symtab,
        unwinds,
    })
}
