//! The arch-specific halves of the macros: the `asm!` that emits notes, semaphores and the nop.
//!
//! Each `__usdt_*` macro exists once per configuration (x86_64, aarch64, anything else or the
//! `no-probes` feature), selected by ordinary `cfg` on *this* crate, so the user's crate sees one
//! definition and never evaluates a `cfg(target_arch)` of its own.

/// Assembler text shared by all arches: the definitions every probe refers to, each guarded by
/// `.ifndef` because many `asm!` blocks of one object file repeat them.
///
/// - `_.stapsdt.base`: sdt.h's one-byte anchor for prelink adjustments. Comdat group
///   `.stapsdt.base` merges all copies (ours and sdt.h's); `R` keeps it under `--gc-sections`,
///   where nothing allocated refers to it.
/// - `usdt_sema.<provider>.<name>`: the 2-byte semaphore, hidden (one per binary or library, which
///   is what the kernel's per-file `ref_ctr_offset` wants), in its own comdat group so every site
///   and every crate of the binary shares it. Kept alive by the code that reads it.
/// - `usdt_markers.probes_anchor`: a page-aligned, retained `.probes` input section. It makes the
///   output `.probes` start on a fresh page, away from RELRO (see the crate docs on rust-lld).
#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_defs {
    ($provider:ident, $sema:expr, $type:literal, $page:literal) => {
        ::core::concat!(
            ".ifndef _.stapsdt.base\n",
            ".pushsection .stapsdt.base, \"aGR\", ",
            $type,
            "progbits, .stapsdt.base, comdat\n",
            ".weak _.stapsdt.base\n",
            ".hidden _.stapsdt.base\n",
            "_.stapsdt.base:\n",
            ".space 1\n",
            ".size _.stapsdt.base, 1\n",
            ".popsection\n",
            ".endif\n",
            ".ifndef usdt_markers.probes_anchor\n",
            ".pushsection .probes, \"awGR\", ",
            $type,
            "progbits, usdt_markers.probes_anchor, comdat\n",
            ".balign ",
            $page,
            "\n",
            ".weak usdt_markers.probes_anchor\n",
            ".hidden usdt_markers.probes_anchor\n",
            "usdt_markers.probes_anchor:\n",
            ".byte 0\n",
            ".popsection\n",
            ".endif\n",
            ".ifndef usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            "\n",
            ".pushsection .probes, \"awG\", ",
            $type,
            "progbits, usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            ", comdat\n",
            ".balign 2\n",
            ".weak usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            "\n",
            ".hidden usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            "\n",
            ".type usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            ", ",
            $type,
            "object\n",
            ".size usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            ", 2\n",
            "usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            ":\n",
            ".2byte 0\n",
            ".popsection\n",
            ".endif"
        )
    };
}

/// The `.note.stapsdt` header and descriptor up to (not including) the argument string, for a
/// site labelled `990:`. Labels 991–994 delimit name and descriptor so the assembler computes
/// `namesz` and `descsz`.
#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_note_head {
    ($provider:ident, $name:expr, $sema:expr, $type:literal) => {
        ::core::concat!(
            ".pushsection .note.stapsdt, \"\", ",
            $type,
            "note\n",
            ".balign 4\n",
            ".4byte 992f-991f, 994f-993f, 3\n",
            "991: .asciz \"stapsdt\"\n",
            "992: .balign 4\n",
            "993: .8byte 990b\n",
            ".8byte _.stapsdt.base\n",
            ".8byte usdt_sema.",
            ::core::stringify!($provider),
            ".",
            $sema,
            "\n",
            ".asciz \"",
            ::core::stringify!($provider),
            "\"\n",
            ".asciz \"",
            $name,
            "\""
        )
    };
}

/// Closes the argument string and the note.
#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_note_tail {
    () => {
        ".byte 0\n994: .balign 4\n.popsection"
    };
}

/// The span hint note in `.note.usdt_markers` (layout in the crate docs). Deduplicated per object
/// file with an `.ifndef` on an assembler-local symbol; copies from other objects remain.
#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_hint_text {
    ($provider:ident, $stem:expr, $type:literal) => {
        $crate::__usdt_hint_text!($provider, $stem, $type, "hint", "1")
    };
    // `kind` keeps the dedup symbols of the two note types apart; `ntype` is the note type.
    ($provider:ident, $stem:expr, $type:literal, $kind:literal, $ntype:literal) => {
        ::core::concat!(
            ".ifndef .Lusdt_",
            $kind,
            ".",
            ::core::stringify!($provider),
            ".",
            $stem,
            "\n",
            ".pushsection .note.usdt_markers, \"\", ",
            $type,
            "note\n",
            ".balign 4\n",
            ".4byte 992f-991f, 994f-993f, ",
            $ntype,
            "\n",
            "991: .asciz \"usdt-markers\"\n",
            "992: .balign 4\n",
            "993:\n",
            ".Lusdt_",
            $kind,
            ".",
            ::core::stringify!($provider),
            ".",
            $stem,
            ":\n",
            ".asciz \"",
            ::core::stringify!($provider),
            "\"\n",
            ".asciz \"",
            $stem,
            "\"\n",
            "994: .balign 4\n",
            ".popsection\n",
            ".endif"
        )
    };
}

/// The argument-names note in `.note.usdt_markers` (type 3): `"provider\0" "name\0"
/// "a, b, c\0"`, the probe's argument names as `stringify!` writes them. Deduplicated per object
/// file like the span hint.
#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_names_text {
    ($provider:ident, $name:expr, $names:expr, $type:literal) => {
        ::core::concat!(
            ".ifndef .Lusdt_names.",
            ::core::stringify!($provider),
            ".",
            $name,
            "\n",
            ".pushsection .note.usdt_markers, \"\", ",
            $type,
            "note\n",
            ".balign 4\n",
            ".4byte 992f-991f, 994f-993f, 3\n",
            "991: .asciz \"usdt-markers\"\n",
            "992: .balign 4\n",
            "993:\n",
            ".Lusdt_names.",
            ::core::stringify!($provider),
            ".",
            $name,
            ":\n",
            ".asciz \"",
            ::core::stringify!($provider),
            "\"\n",
            ".asciz \"",
            $name,
            "\"\n",
            ".asciz \"",
            $names,
            "\"\n",
            "994: .balign 4\n",
            ".popsection\n",
            ".endif"
        )
    };
}

#[cfg(all(target_arch = "x86_64", not(feature = "no-probes")))]
mod imp {
    /// Reads the semaphore. An `asm!` rather than a Rust static because the semaphore is defined
    /// by assembler (so every site and crate can share it by name); `readonly` without `pure`
    /// keeps it from being hoisted out of loops.
    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_enabled {
        ($provider:ident, $sema:expr) => {{
            let sema: u32;
            // SAFETY: defines data in other sections and loads a 2-byte counter it just defined.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_defs!($provider, $sema, "@", "4096"),
                    ::core::concat!(
                        "movzwl usdt_sema.", ::core::stringify!($provider), ".", $sema,
                        "(%rip), {0:e}"
                    ),
                    out(reg) sema,
                    options(att_syntax, nostack, readonly, preserves_flags)
                );
            }
            sema != 0
        }};
    }

    /// The site: `nop; nopl 0x0(%rax,%rax,1)` (`90 0f 1f 44 00 00`), the note's pc on the
    /// `nop`. A tracer that finds the kernel optimizes uprobes attaches to the 5-byte nop, which
    /// the kernel turns into a `call` after the first hit; anything else attaches to the `nop`.
    /// The `call` writes the return address at `-8(%rsp)`, so nothing live may sit in the red
    /// zone here: the site is alone in its own never-inlined function, and the `asm!` has no
    /// `nostack`, which is the language's promise that the block may write below the stack
    /// pointer (LLVM then keeps no value in this function's red zone). See the crate docs.
    ///
    /// The register name is chosen by the assembler from the constant size, because
    /// the template cannot depend on the argument's type: `%al`/`%ax`/`%eax`/`%rax` (or the
    /// matching names of whatever register the compiler picked).
    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_emit {
        ([$provider:ident, $name:expr, $sema:expr] [$(($t:ident $v:ident $sep:literal $e:expr))*]) => {{
            #[cold]
            #[inline(never)]
            #[allow(clippy::too_many_arguments)]
            fn __usdt_fire<$($t: $crate::ProbeArg),*>($($v: $t),*) {
                // SAFETY: two nops, and data in non-allocated note sections.
                unsafe {
                    ::core::arch::asm!(
                        "990: nop",
                        ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
                        $crate::__usdt_note_head!($provider, $name, $sema, "@"),
                        $(
                            ::core::concat!(".if {", ::core::stringify!($t), "} * {",
                                ::core::stringify!($t), "} == 1"),
                            ::core::concat!(".ascii \"", $sep, "{", ::core::stringify!($t), "}@{",
                                ::core::stringify!($v), ":l}\""),
                            ::core::concat!(".elseif {", ::core::stringify!($t), "} * {",
                                ::core::stringify!($t), "} == 4"),
                            ::core::concat!(".ascii \"", $sep, "{", ::core::stringify!($t), "}@{",
                                ::core::stringify!($v), ":x}\""),
                            ::core::concat!(".elseif {", ::core::stringify!($t), "} * {",
                                ::core::stringify!($t), "} == 16"),
                            ::core::concat!(".ascii \"", $sep, "{", ::core::stringify!($t), "}@{",
                                ::core::stringify!($v), ":e}\""),
                            ".else",
                            ::core::concat!(".ascii \"", $sep, "{", ::core::stringify!($t), "}@{",
                                ::core::stringify!($v), ":r}\""),
                            ".endif",
                        )*
                        $crate::__usdt_note_tail!(),
                        $($v = in(reg) $crate::ProbeArg::into_reg($v),)*
                        $($t = const <$t as $crate::ProbeArg>::SIZE,)*
                        // No `nostack`: the optimized site's `call` writes below %rsp.
                        options(att_syntax, readonly, preserves_flags)
                    );
                }
            }
            __usdt_fire($($e),*)
        }};
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_span_hint {
        ($provider:ident, $stem:expr) => {
            // SAFETY: only data in a non-allocated note section.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_hint_text!($provider, $stem, "@"),
                    options(att_syntax, nostack, nomem, preserves_flags)
                );
            }
        };
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_poll_hint {
        ($provider:ident, $stem:expr) => {
            // SAFETY: only data in a non-allocated note section.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_hint_text!($provider, $stem, "@", "poll", "2"),
                    options(att_syntax, nostack, nomem, preserves_flags)
                );
            }
        };
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_names_hint {
        ($provider:ident, $name:expr, $names:expr) => {
            // SAFETY: only data in a non-allocated note section.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_names_text!($provider, $name, $names, "@"),
                    options(att_syntax, nostack, nomem, preserves_flags)
                );
            }
        };
    }
}

#[cfg(all(target_arch = "aarch64", not(feature = "no-probes")))]
mod imp {
    // Pages may be up to 64 KiB on aarch64, hence the larger anchor alignment.
    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_enabled {
        ($provider:ident, $sema:expr) => {{
            let sema: u32;
            // SAFETY: defines data in other sections and loads a 2-byte counter it just defined.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_defs!($provider, $sema, "%", "65536"),
                    ::core::concat!("adrp {1}, usdt_sema.", ::core::stringify!($provider), ".",
                        $sema),
                    ::core::concat!("ldrh {0:w}, [{1}, :lo12:usdt_sema.",
                        ::core::stringify!($provider), ".", $sema, "]"),
                    out(reg) sema,
                    out(reg) _,
                    options(nostack, readonly, preserves_flags)
                );
            }
            sema != 0
        }};
    }

    // aarch64 specs name the 64-bit register (`-4@x3`); the size before `@` tells the width.
    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_emit {
        ([$provider:ident, $name:expr, $sema:expr] [$(($t:ident $v:ident $sep:literal $e:expr))*]) => {{
            #[cold]
            #[inline(never)]
            #[allow(clippy::too_many_arguments)]
            fn __usdt_fire<$($t: $crate::ProbeArg),*>($($v: $t),*) {
                // SAFETY: a nop, and data in non-allocated note sections.
                unsafe {
                    ::core::arch::asm!(
                        "990: nop",
                        $crate::__usdt_note_head!($provider, $name, $sema, "%"),
                        $(
                            ::core::concat!(".ascii \"", $sep, "{", ::core::stringify!($t), "}@{",
                                ::core::stringify!($v), ":x}\""),
                        )*
                        $crate::__usdt_note_tail!(),
                        $($v = in(reg) $crate::ProbeArg::into_reg($v),)*
                        $($t = const <$t as $crate::ProbeArg>::SIZE,)*
                        options(nostack, readonly, preserves_flags)
                    );
                }
            }
            __usdt_fire($($e),*)
        }};
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_span_hint {
        ($provider:ident, $stem:expr) => {
            // SAFETY: only data in a non-allocated note section.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_hint_text!($provider, $stem, "%"),
                    options(nostack, nomem, preserves_flags)
                );
            }
        };
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_poll_hint {
        ($provider:ident, $stem:expr) => {
            // SAFETY: only data in a non-allocated note section.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_hint_text!($provider, $stem, "%", "poll", "2"),
                    options(nostack, nomem, preserves_flags)
                );
            }
        };
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_names_hint {
        ($provider:ident, $name:expr, $names:expr) => {
            // SAFETY: only data in a non-allocated note section.
            unsafe {
                ::core::arch::asm!(
                    $crate::__usdt_names_text!($provider, $name, $names, "%"),
                    options(nostack, nomem, preserves_flags)
                );
            }
        };
    }
}

/// Unsupported arches and `no-probes`: nothing is emitted, nothing is enabled, arguments are
/// type-checked but never evaluated.
#[cfg(any(
    feature = "no-probes",
    not(any(target_arch = "x86_64", target_arch = "aarch64"))
))]
mod imp {
    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_enabled {
        ($provider:ident, $sema:expr) => {
            false
        };
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_emit {
        ([$($hdr:tt)*] [$(($t:ident $v:ident $sep:literal $e:expr))*]) => {{
            $(let _ = &$e;)*
        }};
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_span_hint {
        ($provider:ident, $stem:expr) => {};
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_poll_hint {
        ($provider:ident, $stem:expr) => {};
    }

    #[doc(hidden)]
    #[macro_export]
    macro_rules! __usdt_names_hint {
        ($provider:ident, $name:expr, $names:expr) => {};
    }
}
