//! Symbol addresses for the argument operands that name a symbol (`mp_+24(%rip)`, gcc
//! -no-pie's `arr(,%rax,8)`), from `.symtab`, then `.dynsym` for names `.symtab` lacks.

use super::warnings::{ElfWarning, Warnings};
use crate::elf::argspec::{ParsedArg, SymbolRef};
use object::elf;
use object::read::elf::{FileHeader, SectionTable, Sym};
use object::Endianness;
use std::collections::{HashMap, HashSet};

/// What the symbol tables say about one name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lookup {
    Found(u64),
    /// Two definitions with different values (two local statics of one name in different
    /// files): which one the compiler meant is not recorded, so reading either could be wrong.
    Ambiguous,
}

/// Addresses of the symbols an object's arguments name, and the warnings about those that
/// have none. Each name is warned about once.
pub(super) struct Resolver {
    found: HashMap<Vec<u8>, Lookup>,
    /// ET_EXEC: absolute symbol operands are readable only where the load bias is 0.
    exec: bool,
    warned: HashSet<String>,
    warned_pic: HashSet<String>,
}

impl Resolver {
    /// Reads the symbol tables for the names `args` need. Only those names are looked at, so
    /// large symbol tables cost one pass each, and none when no argument names a symbol.
    pub(super) fn new<'data, 'a, Elf: FileHeader<Endian = Endianness>>(
        sections: &SectionTable<'data, Elf, &'data [u8]>,
        endian: Endianness,
        data: &'data [u8],
        exec: bool,
        args: impl Iterator<Item = &'a ParsedArg>,
    ) -> Resolver {
        let mut wanted: HashMap<Vec<u8>, Option<Lookup>> = HashMap::new();
        for a in args {
            match a.symbol() {
                Some(SymbolRef {
                    name,
                    absolute: false,
                }) => {
                    wanted.insert(name.as_bytes().to_vec(), None);
                }
                Some(SymbolRef {
                    name,
                    absolute: true,
                }) if exec => {
                    wanted.insert(name.as_bytes().to_vec(), None);
                }
                _ => {}
            }
        }
        for table in [elf::SHT_SYMTAB, elf::SHT_DYNSYM] {
            if wanted.values().all(Option::is_some) {
                break;
            }
            let Ok(symbols) = sections.symbols(endian, data, table) else {
                continue;
            };
            let mut found: HashMap<Vec<u8>, Lookup> = HashMap::new();
            for sym in symbols.iter() {
                if sym.st_shndx(endian) == elf::SHN_UNDEF {
                    continue;
                }
                let Ok(name) = symbols.symbol_name(endian, sym) else {
                    continue;
                };
                if !matches!(wanted.get(name), Some(None)) {
                    continue;
                }
                let value: u64 = sym.st_value(endian).into();
                found
                    .entry(name.to_vec())
                    .and_modify(|v| {
                        if *v != Lookup::Found(value) {
                            *v = Lookup::Ambiguous;
                        }
                    })
                    .or_insert(Lookup::Found(value));
            }
            for (name, v) in found {
                wanted.insert(name, Some(v));
            }
        }
        Resolver {
            found: wanted
                .into_iter()
                .filter_map(|(k, v)| Some((k, v?)))
                .collect(),
            exec,
            warned: HashSet::new(),
            warned_pic: HashSet::new(),
        }
    }

    /// Finishes one argument, warning (once per symbol) when its symbol has no usable address.
    pub(super) fn resolve(
        &mut self,
        arg: ParsedArg,
        warnings: &mut Warnings,
    ) -> crate::elf::argspec::ArgSpec {
        let address = match arg.symbol() {
            None => None,
            Some(SymbolRef {
                name,
                absolute: true,
            }) if !self.exec => {
                if self.warned_pic.insert(name.to_string()) {
                    warnings.push(ElfWarning::AbsoluteSymbolInPic {
                        symbol: name.to_string(),
                        arg: arg.raw().to_string(),
                    });
                }
                None
            }
            Some(SymbolRef { name, .. }) => match self.found.get(name.as_bytes()) {
                Some(Lookup::Found(v)) => Some(*v),
                Some(Lookup::Ambiguous) => {
                    if self.warned.insert(name.to_string()) {
                        warnings.push(ElfWarning::AmbiguousSymbol {
                            symbol: name.to_string(),
                        });
                    }
                    None
                }
                None => {
                    if self.warned.insert(name.to_string()) {
                        warnings.push(ElfWarning::MissingSymbol {
                            symbol: name.to_string(),
                        });
                    }
                    None
                }
            },
        };
        arg.resolve(|_| address)
    }
}
