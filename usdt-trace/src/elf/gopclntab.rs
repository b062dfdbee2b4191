//! Go function names and bounds from `.gopclntab`, for Go programs without a symbol table.
//!
//! Distributions strip their Go binaries (Debian's `go` itself), which removes `.symtab` but
//! not the runtime's own function table: Go needs it for tracebacks. Since Go 1.18 its header
//! is `magic u32, 0, 0, minLC u8, ptrSize u8`, then `nfunc, nfiles, textStart, funcnameOffset,
//! cuOffset, filetabOffset, pctabOffset, pclnOffset` (ptrSize each); at `pclnOffset` come
//! `nfunc + 1` pairs `(entryoff u32, funcoff u32)`, entries relative to `textStart`, and each
//! function's record (at `pclnOffset + funcoff`) starts `entryOff u32, nameOff i32`, the name
//! NUL-terminated at `funcnameOffset + nameOff`. A function's size is the distance to the next
//! entry. Parsed like any untrusted input: every read is bounds-checked, the first bad value
//! ends the table.

/// Go 1.18/1.19 and 1.20+ (the layout above is the same).
const MAGICS: [u32; 2] = [0xffff_fff0, 0xffff_fff1];
/// Names longer than this are not Go's.
const MAX_NAME: usize = 4096;

/// One function: its name, link-time address and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunc {
    pub name: String,
    pub address: u64,
    pub size: u64,
}

/// The functions of a `.gopclntab` section (`data`, little-endian). `text` is the address of
/// `.text`, used when the header's `textStart` is 0 (a PIE, where the loader fills it in).
/// An unknown or damaged table gives what was read before the damage (nothing for a wrong
/// magic).
pub fn functions(data: &[u8], text: u64) -> Vec<GoFunc> {
    let u32_at = |o: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            data.get(o..o.checked_add(4)?)?.try_into().ok()?,
        ))
    };
    let Some(magic) = u32_at(0) else {
        return Vec::new();
    };
    if !MAGICS.contains(&magic) || data.len() < 8 {
        return Vec::new();
    }
    let ptr = usize::from(data[7]);
    if ptr != 4 && ptr != 8 {
        return Vec::new();
    }
    let word = |i: usize| -> Option<u64> {
        let o = 8usize.checked_add(i.checked_mul(ptr)?)?;
        let b = data.get(o..o.checked_add(ptr)?)?;
        Some(if ptr == 8 {
            u64::from_le_bytes(b.try_into().ok()?)
        } else {
            u64::from(u32::from_le_bytes(b.try_into().ok()?))
        })
    };
    let (Some(nfunc), Some(text_start), Some(names), Some(pcln)) =
        (word(0), word(2), word(3), word(7))
    else {
        return Vec::new();
    };
    let text_start = if text_start == 0 { text } else { text_start };
    let (Ok(nfunc), Ok(names), Ok(pcln)) = (
        usize::try_from(nfunc),
        usize::try_from(names),
        usize::try_from(pcln),
    ) else {
        return Vec::new();
    };
    // Each functab entry is 8 bytes: a count the section cannot hold is damage.
    if nfunc > data.len() / 8 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(nfunc);
    for i in 0..nfunc {
        let at = |k: usize| pcln.checked_add(k.checked_mul(8)?);
        let (Some(entry), Some(funcoff), Some(next)) = (
            at(i).and_then(u32_at),
            at(i).and_then(|o| u32_at(o + 4)),
            at(i + 1).and_then(u32_at),
        ) else {
            break;
        };
        let Some(rec) = pcln.checked_add(funcoff as usize) else {
            break;
        };
        let Some(name_off) = u32_at(rec + 4) else {
            break;
        };
        let Some(name) = names
            .checked_add(name_off as usize)
            .and_then(|o| data.get(o..))
            .and_then(|b| {
                b.iter()
                    .take(MAX_NAME)
                    .position(|&c| c == 0)
                    .map(|n| &b[..n])
            })
        else {
            break;
        };
        if next < entry {
            break;
        }
        out.push(GoFunc {
            name: String::from_utf8_lossy(name).into_owned(),
            address: text_start.wrapping_add(u64::from(entry)),
            size: u64::from(next - entry),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A 64-bit table of two functions, laid out as Go 1.20 writes it.
    fn table(text_start: u64) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend(0xffff_fff1u32.to_le_bytes());
        d.extend([0, 0, 1, 8]);
        let names_off = 8 + 8 * 8;
        let names = b"main.main\0main.f\0";
        let pcln_off = names_off + names.len();
        for w in [
            2u64,
            0,
            text_start,
            names_off as u64,
            0,
            0,
            0,
            pcln_off as u64,
        ] {
            d.extend(w.to_le_bytes());
        }
        d.extend(names);
        // functab: (0, rec0), (0x40, rec1), end 0x58; records after it.
        let recs = 3 * 8;
        for (e, f) in [(0u32, recs as u32), (0x40, recs as u32 + 8), (0x58, 0)] {
            d.extend(e.to_le_bytes());
            d.extend(f.to_le_bytes());
        }
        for (e, n) in [(0u32, 0i32), (0x40, 10)] {
            d.extend(e.to_le_bytes());
            d.extend(n.to_le_bytes());
        }
        d
    }

    #[test]
    fn names_addresses_and_sizes_from_the_table() {
        let f = functions(&table(0x401000), 0);
        assert_eq!(
            f,
            vec![
                GoFunc {
                    name: "main.main".into(),
                    address: 0x401000,
                    size: 0x40
                },
                GoFunc {
                    name: "main.f".into(),
                    address: 0x401040,
                    size: 0x18
                }
            ]
        );
        // A PIE's textStart is 0 in the file: .text's address stands in.
        assert_eq!(functions(&table(0), 0x1000)[1].address, 0x1040);
    }

    #[test]
    fn damage_stops_the_table_and_never_panics() {
        let t = table(0x401000);
        for cut in 0..t.len() {
            let _ = functions(&t[..cut], 0);
        }
        let mut bad = t.clone();
        bad[0] = 0;
        assert!(functions(&bad, 0).is_empty());
        // A function count the section cannot hold.
        let mut huge = t.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(functions(&huge, 0).is_empty());
    }
}
