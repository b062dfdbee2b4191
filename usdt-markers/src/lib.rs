//! USDT probes for Rust (and C, see `include/usdt_markers.h`), in the SystemTap SDT v3 format that
//! readelf, bpftrace, bcc, libbpf, GDB and `usdt-trace` understand.
//!
//! ```
//! use usdt_markers::{enabled, probe, span};
//!
//! fn handle(req_id: u64, path: &str) -> (u16, u64) {
//!     // Point probe `myapp:lookup` with two arguments: `8@%reg` and the address of `path`.
//!     probe!(myapp, lookup, req_id, path.as_ptr());
//!
//!     // Span: fires `myapp:work__start(span_id, parent_id, req_id)` now and
//!     // `myapp:work__end(span_id, status, bytes)` on `end` (or on drop, with zeros).
//!     let s = span!(myapp, work, req_id; end(u16, u64));
//!     if enabled!(myapp, lookup) {
//!         // expensive diagnostics only while somebody traces `myapp:lookup`
//!     }
//!     s.end(200, 1234);
//!     (200, 1234)
//! }
//! # handle(1, "/");
//! ```
//!
//! # A crash course in USDT notes
//!
//! A USDT probe is three things the compiler leaves in the binary:
//!
//! 1. **The site**: on x86_64 `nop; nopl 0x0(%rax,%rax,1)` (6 bytes, see [below](#the-site-on-x86_64-nop-nop5-and-the-red-zone)),
//!    a 4-byte `nop` on aarch64. A tracer puts a uprobe (breakpoint) on it. Just before it, the
//!    argument values are in registers, and the note says which ones.
//! 2. **The note**: an ELF note in the non-allocated section `.note.stapsdt` (so it is in no
//!    `PT_NOTE` segment; tools read it through the section headers):
//!
//!    ```text
//!    u32 namesz = 8            u32 descsz            u32 type = 3
//!    "stapsdt\0"               (name, padded to 4 bytes)
//!    desc:  u64 pc             address of the nop (link-time address)
//!           u64 base           address of `_.stapsdt.base` (see below)
//!           u64 semaphore      address of the is-enabled counter, or 0
//!           "provider\0" "name\0" "args\0"
//!           (padding to 4 bytes)
//!    ```
//!
//!    `args` is a space-separated list of `[-]SIZE@OPERAND`, for example `-4@%edi 8@%rax 1@%sil`:
//!    SIZE is the argument's size in bytes, a leading `-` means signed, and the operand names
//!    where the value is at the nop. This crate always uses a register, named at the width of the
//!    argument on x86_64 (`%al`, `%ax`, `%eax`, `%rax`) and as `xN` on aarch64.
//! 3. **`.stapsdt.base`**: an allocated section holding one byte at the hidden symbol
//!    `_.stapsdt.base`, shared by all objects through the comdat group `.stapsdt.base`. Its address is
//!    recorded in every note; if a tool such as prelink moves the binary after linking, the shift
//!    `sh_addr(.stapsdt.base) - base` corrects `pc` and `semaphore`.
//!
//! All of it is written by inline `asm!` (`.pushsection`/`.popsection` around the note data), the way
//! systemtap's `<sys/sdt.h>` does for C, and as the `probe` and `usdt` crates do. We do not build
//! on them because everything we need lives in that one `asm!` block and the sections it
//! writes: where the semaphore goes (page-aligned `.probes`, see below), one semaphore shared by
//! both probes of a span, the span hint note, and register names at the argument's width.
//!
//! ## Argument sizes without a proc-macro
//!
//! Each probe expands to a small generic function `fn fire<A0: ProbeArg, …>(a0: A0, …)` whose
//! `asm!` receives the value as `in(reg)` and the size as `const <A0 as ProbeArg>::SIZE` (`-4`
//! for `i32`). Which register name to print (`{a0:l}`, `{a0:x}`, `{a0:e}`, `{a0:r}`) is chosen
//! by the assembler with `.if SIZE*SIZE == 1 … .elseif …`, because the template itself cannot depend
//! on a type. See [`ProbeArg`] for the supported types.
//!
//! # The site on x86_64: `nop; nop5`, and the red zone
//!
//! The note's pc is the `nop`; a 5-byte `nopl 0x0(%rax,%rax,1)` follows (`90 0f 1f 44 00 00`,
//! the shape libbpf's `usdt.h` first used). Tools that know nothing of it probe the `nop` as
//! always: readelf, bpftrace, bcc, libbpf, perf. On Linux 6.18+ (`sys_uprobe` and
//! `arch_uprobe_optimize`) a uprobe on that exact 5-byte nop is rewritten, after its first hit,
//! into a `call` to a trampoline that enters the kernel by syscall: no trap, about 3x cheaper.
//! `usdt-trace watch` attaches there when the running kernel does this, and on the `nop`
//! otherwise (where a 5-byte nop would be single-stepped). A 10-byte nop (libbpf's newest
//! `nop; nop10`) is not an option on 6.18: its `cs` prefix makes the kernel refuse a uprobe on
//! it (`ENOTSUPP`), and only the 5-byte nop is optimized.
//!
//! The `call` pushes its return address at `-8(%rsp)` (and the trampoline saves registers below
//! that). A leaf function may keep locals, and a compiler may place a probe argument, in the
//! 128-byte red zone below `%rsp`; they would read as garbage from the second hit on. So no
//! site may ever have live data below `%rsp`:
//!
//! - **Rust.** The site is alone in its own `#[inline(never)]` function, so the caller has made
//!   a call and keeps nothing below its stack pointer; and the `asm!` has no `nostack` option,
//!   which is Rust's promise that the block may push or write the red zone: the compiler keeps
//!   no value there across it (LLVM treats the function as making a call; it aligns the stack
//!   with one `push`). With `nostack` a leaf's spills may sit in the red zone; without the
//!   separate function the caller's locals could.
//! - **C** (`include/usdt_markers.h`, gcc and clang, any `-O`): inline asm cannot declare that it
//!   writes below `%rsp`, so the enabled branch of every probe also calls
//!   `usdt_markers_redzone_guard()`, an empty weak function no compiler may inline or drop. A
//!   function that makes a call is not a leaf, and neither gcc nor clang uses the red zone in
//!   it. The call runs only while the probe is enabled.
//!
//! `tests/tests/markers_redzone.rs` traces leaf functions whose six locals and two arguments sit
//! in the red zone (gcc and clang, `-O2` and `-O3`) on the optimized site and checks every value
//! and every probe argument after each hit; built without the guard, the same program sees its
//! values change from the second hit on, which the test also checks.
//!
//! # Semaphores (is-enabled probes)
//!
//! Every probe name gets a 2-byte counter, `usdt_sema.<provider>.<name>` (hidden, in section
//! `.probes`, one comdat group per name so all sites and all crates of one binary share it). The
//! kernel increments it while a uprobe registered with that `ref_ctr_offset` is attached, so the
//! site is compiled as
//!
//! ```text
//! if semaphore != 0 { evaluate the arguments; call the cold function that holds the site }
//! ```
//!
//! and an untraced probe costs one load and one branch; its arguments are not evaluated.
//! [`enabled!`] reads the same counter. Both probes of a span share the span's counter
//! (`usdt_sema.<provider>.<span name>`).
//!
//! ## Why `.probes` is page-aligned (the rust-lld semaphore bug)
//!
//! lld (Rust's default linker on x86_64 Linux) lays out writable data as two `PT_LOAD`s: RELRO
//! (`.data.rel.ro`, `.got`, …) then `.data`/`.bss`. The second one starts on a new page in memory
//! but **on the same page of the file** where RELRO ends. The dynamic loader maps the RELRO segment
//! writable first (to relocate it, then `mprotect`s it read-only), so for a moment two writable
//! private mappings of the file contain the semaphore's file offset. When a process maps the file
//! after a tracer attached, the kernel (`uprobe_mmap` → `delayed_ref_ctr_inc`) increments the
//! counter in the first mapping that qualifies, which is the RELRO copy, and forgets about it: the
//! real semaphore stays 0 and the probe never fires in processes started after the tracer. Linking
//! with GNU ld or `-z separate-loadable-segments` avoids it, but users should not have to.
//!
//! So every object with a probe also emits `usdt_markers.probes_anchor`, a retained (`SHF_GNU_RETAIN`),
//! comdat-deduplicated, **page-aligned** `.probes` input section. The output section `.probes` then
//! starts on a page boundary both in memory and in the file, which is past the last file page of
//! the RELRO segment: no other mapping can contain a semaphore, and the kernel's delayed increment
//! lands where the code reads it. Cost: up to one page of padding per binary. Verified by
//! `tests/tests/markers_semaphore.rs`: `rust_lld_semaphores_on_a_page_of_their_own` checks the
//! layout, and `rust_lld_semaphores_before_during_after_attach` starts processes after bpftrace
//! attached and checks they see their semaphore raised.
//!
//! # Spans
//!
//! [`span!`] fires `<name>__start(span_id, parent_id, args…)` and returns a [`Span`] guard that
//! fires `<name>__end(span_id, end_args…)` when ended or dropped. Span ids are unique per process
//! and never 0; the parent is the innermost span of the current thread (or one you pass). The
//! guard is `Send`, so a span can live across `.await` and end on another thread: tracers pair
//! `__start` and `__end` by `(pid, span_id)`, not by thread. To tell them so, every span also
//! emits a project-private note:
//!
//! ```text
//! section .note.usdt_markers (SHT_NOTE, not allocated, like .note.stapsdt)
//! u32 namesz = 13   u32 descsz   u32 type = 1
//! "usdt-markers\0"  (padded to 16)
//! desc: "provider\0" "stem\0"  (padded to 4; stem = span name without `__start`/`__end`)
//! ```
//!
//! The same hint may appear several times (once per object file); treat it as a set.
//!
//! [`poll_markers!`] adds a note of type 2 with the same descriptor: the span's polls are marked
//! by `<stem>__enter(span_id)` and `<stem>__exit(span_id)`, which share the span's semaphore.
//!
//! A [`probe!`] whose arguments are named (`probe!(app, sent, len = n, status = s)`) adds a
//! note of type 3: `"provider\0" "name\0" "len, status\0"` (the names as `stringify!` joins
//! them; split on `,` and trim).
//!
//! # Linkers and `--gc-sections`
//!
//! The notes are not allocated, so section garbage collection keeps them (a note of a discarded
//! function gets pc 0; tools skip those). `.stapsdt.base` and the `.probes` anchor are referenced
//! only from notes, so they carry the retain flag (`"R"`, `SHF_GNU_RETAIN`); semaphores are kept
//! alive by the code that reads them. Tested with rust-lld, GNU ld and mold.
//!
//! # Feature `no-probes`
//!
//! Compiles every probe, span and [`enabled!`] to nothing (no notes, no semaphores, `enabled!` is
//! `false`, span ids are 0), to measure what the markers cost.
#![warn(missing_docs)]

mod arch;
mod poll;
mod span;

pub use poll::{Entered, Instrumented, PollMarkers};
pub use span::Span;

/// A value that can be passed as a probe argument.
///
/// `SIZE` is the size in bytes as written in the note's argument spec, negative for signed types
/// (`-4` for `i32`, `1` for `u8` and `bool`, `8` for pointers). `into_reg` widens the value to a
/// register (zero- or sign-extended, whichever the type calls for), so the low `SIZE` bytes of the
/// register hold the value the tracer reads.
///
/// Implemented for all integer types, `bool`, `char`, raw pointers and references (a reference is
/// passed as its address; for `&str` and slices, the address of the first byte).
///
/// # Safety
///
/// `SIZE` must be one of ±1, ±2, ±4, ±8 and describe what `into_reg` puts in the register, or
/// tracers read garbage.
pub unsafe trait ProbeArg {
    /// Size in bytes as written in the argument spec; negative for signed.
    const SIZE: i8;
    /// The value widened to a 64-bit register.
    fn into_reg(self) -> u64;
}

macro_rules! probe_arg_int {
    ($($t:ty => $size:expr, $via:ty;)*) => {$(
        // SAFETY: the size matches the type, and `as $via as u64` sign- or zero-extends like it.
        unsafe impl ProbeArg for $t {
            const SIZE: i8 = $size;
            #[inline(always)]
            fn into_reg(self) -> u64 {
                self as $via as u64
            }
        }
    )*};
}

probe_arg_int! {
    u8 => 1, u64;
    u16 => 2, u64;
    u32 => 4, u64;
    u64 => 8, u64;
    i8 => -1, i64;
    i16 => -2, i64;
    i32 => -4, i64;
    i64 => -8, i64;
    usize => core::mem::size_of::<usize>() as i8, u64;
    isize => -(core::mem::size_of::<isize>() as i8), i64;
}

// SAFETY: a bool is one byte, 0 or 1.
unsafe impl ProbeArg for bool {
    const SIZE: i8 = 1;
    #[inline(always)]
    fn into_reg(self) -> u64 {
        self as u64
    }
}

// SAFETY: a char is a 4-byte unsigned code point.
unsafe impl ProbeArg for char {
    const SIZE: i8 = 4;
    #[inline(always)]
    fn into_reg(self) -> u64 {
        self as u64
    }
}

// SAFETY: pointers are passed as unsigned addresses of pointer size.
unsafe impl<T: ?Sized> ProbeArg for *const T {
    const SIZE: i8 = core::mem::size_of::<usize>() as i8;
    #[inline(always)]
    fn into_reg(self) -> u64 {
        self.cast::<u8>() as usize as u64
    }
}

// SAFETY: as for `*const T`.
unsafe impl<T: ?Sized> ProbeArg for *mut T {
    const SIZE: i8 = core::mem::size_of::<usize>() as i8;
    #[inline(always)]
    fn into_reg(self) -> u64 {
        self.cast::<u8>() as usize as u64
    }
}

// SAFETY: as for `*const T`.
unsafe impl<T: ?Sized> ProbeArg for &T {
    const SIZE: i8 = core::mem::size_of::<usize>() as i8;
    #[inline(always)]
    fn into_reg(self) -> u64 {
        (self as *const T).cast::<u8>() as usize as u64
    }
}

// SAFETY: as for `*const T`.
unsafe impl<T: ?Sized> ProbeArg for &mut T {
    const SIZE: i8 = core::mem::size_of::<usize>() as i8;
    #[inline(always)]
    fn into_reg(self) -> u64 {
        (self as *mut T).cast::<u8>() as usize as u64
    }
}

/// Fires the USDT probe `provider:name` with up to 12 arguments (see [`ProbeArg`]).
///
/// The arguments are evaluated only while a tracer has the probe enabled (its semaphore is
/// non-zero); otherwise the probe costs a load and a branch.
///
/// Arguments may be named, all of them, as `name = value`: the names go into a note of the
/// binary (`.note.usdt_markers`, type 3), and usdt-trace shows them instead of `arg0`, `arg1`.
///
/// ```
/// let bytes: u64 = 42;
/// usdt_markers::probe!(myapp, sent, bytes, -1i32, true);
/// usdt_markers::probe!(myapp, tick);
/// usdt_markers::probe!(myapp, received, len = bytes, status = 200u16);
/// ```
#[macro_export]
macro_rules! probe {
    // Named: an assignment is never a probe argument (`()` has no `ProbeArg`), so this form
    // cannot take a positional call by mistake.
    ($provider:ident, $name:ident $(, $aname:ident = $arg:expr)+ $(,)?) => {{
        $crate::__usdt_names_hint!(
            $provider,
            ::core::stringify!($name),
            ::core::stringify!($($aname),+)
        );
        $crate::probe!($provider, $name $(, $arg)+)
    }};
    ($provider:ident, $name:ident $(, $arg:expr)* $(,)?) => {
        if $crate::enabled!($provider, $name) {
            $crate::__usdt_fire!(
                [$provider, ::core::stringify!($name), ::core::stringify!($name)]
                $($arg),*
            );
        }
    };
}

/// `true` while a tracer has `provider:name` enabled (its semaphore is non-zero).
///
/// For a span, pass the span's name (`enabled!(httpserver, request)`): both of its probes share
/// that semaphore.
#[macro_export]
macro_rules! enabled {
    ($provider:ident, $name:ident) => {
        $crate::__usdt_enabled!($provider, ::core::stringify!($name))
    };
}

/// Opens a span: fires `provider:name__start(span_id, parent_id, args…)` and returns a [`Span`]
/// that fires `provider:name__end(span_id, end_args…)` when [ended](Span::end) or dropped.
///
/// Forms (the optional parts in this order):
///
/// ```
/// # use usdt_markers::span;
/// # let (req_id, status, bytes, outer) = (1u64, 200u16, 10u64, 0u64);
/// // parent = innermost span of this thread; this span becomes the thread's current one
/// let s = span!(myapp, work, req_id);
/// s.end();                               // or just drop it
///
/// // typed end arguments: `myapp:request__end(span_id, status, bytes)`
/// let s = span!(myapp, request, req_id; end(u16, u64));
/// s.end(status, bytes);                  // dropped without `end`: zeros
///
/// // explicit parent (0 for none); the thread's current span is left alone, which is what you
/// // want for a span that lives across `.await`
/// let s = span!(myapp, request, req_id; parent = outer; end(u16, u64));
/// let child = span!(myapp, send; parent = s.id());
/// ```
///
/// Up to 10 start arguments and 11 end arguments (12 minus the span and parent ids). End
/// argument types must implement [`ProbeArg`] and `Default`.
#[macro_export]
macro_rules! span {
    ($provider:ident, $name:ident $(, $arg:expr)*
        $(; parent = $parent:expr)?
        $(; end($($et:ty),* $(,)?))? $(;)?) => {{
        $crate::__usdt_end_fn!(__usdt_span_end, $provider, $name, [$($($et),*)?]);
        if $crate::enabled!($provider, $name) {
            $crate::__usdt_span_hint!($provider, ::core::stringify!($name));
            let __usdt_id = $crate::__private::next_span_id();
            let (__usdt_parent, __usdt_prev, __usdt_tl) =
                $crate::__usdt_parent!(__usdt_id $(, $parent)?);
            $crate::__usdt_fire!(
                [$provider,
                 ::core::concat!(::core::stringify!($name), "__start"),
                 ::core::stringify!($name)]
                __usdt_id, __usdt_parent $(, $arg)*
            );
            $crate::Span::__started(__usdt_id, __usdt_prev, __usdt_tl, __usdt_span_end)
        } else {
            $crate::Span::__disabled(__usdt_span_end)
        }
    }};
}

/// Hands the W3C trace context of the request a span serves to the tracer, so the spans the
/// kernel measures join the application's own distributed trace (`usdt-trace watch --otlp`
/// puts the span, and everything nested in it, in trace `trace_id` under `parent_span_id`).
/// Fires `provider:trace__context(span_id, trace_id_hi, trace_id_lo, parent_span_id)` while
/// the span is open; nothing when the span is not recording or no tracer is attached.
///
/// ```
/// use usdt_markers::{span, trace_context};
/// // From a `traceparent: 00-<32 hex trace id>-<16 hex parent id>-01` header:
/// let trace_id: u128 = 0x4bf92f3577b34da6a3ce929d0e0e4736;
/// let parent: u64 = 0x00f067aa0ba902b7;
/// let s = span!(myapp, request);
/// trace_context!(myapp, s.id(), trace_id, parent);
/// ```
#[macro_export]
macro_rules! trace_context {
    ($provider:ident, $span_id:expr, $trace_id:expr, $parent_span_id:expr $(,)?) => {{
        let __usdt_span: u64 = $span_id;
        // A span that is not recording has id 0: there is nothing to attach the context to.
        if __usdt_span != 0 {
            let __usdt_trace: u128 = $trace_id;
            let __usdt_parent: u64 = $parent_span_id;
            $crate::probe!(
                $provider,
                trace__context,
                __usdt_span,
                (__usdt_trace >> 64) as u64,
                __usdt_trace as u64,
                __usdt_parent
            );
        }
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_parent {
    ($id:ident) => {{
        let prev = $crate::__private::enter($id);
        (prev, prev, true)
    }};
    ($id:ident, $parent:expr) => {
        (($parent) as u64, 0u64, false)
    };
}

// The `__usdt_span_end` function: the `__end` site with typed end arguments.
#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_end_fn {
    ($fn:ident, $provider:ident, $name:ident, [$($et:ty),*]) => {
        $crate::__usdt_end_fn!(@zip $fn, $provider, $name, [] [$($et),*]
            [e0 e1 e2 e3 e4 e5 e6 e7 e8 e9 e10]);
    };
    (@zip $fn:ident, $provider:ident, $name:ident, [$($done:tt)*] [$t:ty $(, $rest:ty)*]
        [$v:ident $($vs:ident)*]) => {
        $crate::__usdt_end_fn!(@zip $fn, $provider, $name, [$($done)* ($v $t)] [$($rest),*]
            [$($vs)*]);
    };
    (@zip $fn:ident, $provider:ident, $name:ident, [$(($v:ident $t:ty))*] [] [$($vs:ident)*]) => {
        #[allow(unused_variables, unused_parens)]
        fn $fn(id: u64, args: ($($t,)*)) {
            if $crate::enabled!($provider, $name) {
                let ($($v,)*) = args;
                $crate::__usdt_fire!(
                    [$provider,
                     ::core::concat!(::core::stringify!($name), "__end"),
                     ::core::stringify!($name)]
                    id $(, $v)*
                );
            }
        }
    };
    (@zip $fn:ident, $provider:ident, $name:ident, $done:tt [$($rest:ty),+] []) => {
        ::core::compile_error!("usdt-markers: a span takes at most 11 end arguments");
    };
}

// Pairs each argument with a type parameter and a parameter name, then hands the list to the
// arch-specific emitter. `[$provider, "name", "semaphore name"]`.
#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_fire {
    ([$($hdr:tt)*] $($arg:expr),*) => {
        $crate::__usdt_fire!(@zip [$($hdr)*] [] [""] [$($arg),*]
            [A0 A1 A2 A3 A4 A5 A6 A7 A8 A9 A10 A11]
            [a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 a10 a11])
    };
    (@zip $hdr:tt [$($done:tt)*] [$sep:literal] [$e:expr $(, $rest:expr)*]
        [$t:ident $($ts:ident)*] [$v:ident $($vs:ident)*]) => {
        $crate::__usdt_fire!(@zip $hdr [$($done)* ($t $v $sep $e)] [" "] [$($rest),*]
            [$($ts)*] [$($vs)*])
    };
    (@zip $hdr:tt $done:tt $sep:tt [] $ts:tt $vs:tt) => {
        $crate::__usdt_emit!($hdr $done)
    };
    (@zip $hdr:tt $done:tt $sep:tt [$($rest:expr),+] [] []) => {
        ::core::compile_error!("usdt-markers: a probe takes at most 12 arguments")
    };
}

/// The poll markers of span `provider:name`: a [`PollMarkers`] that fires
/// `provider:name__enter(span_id)` and `provider:name__exit(span_id)` around each poll of a
/// future ([`PollMarkers::instrument`]) or around a guarded block ([`PollMarkers::enter`]).
///
/// With them, a tracer can split the time of a span that hops threads: each polling thread's
/// on-CPU, run-queue, sleep and I/O time while entered, and the time between polls (waiting to
/// be polled). They share the span's semaphore and declare themselves in `.note.usdt_markers`
/// (note type 2, same descriptor as the span hint), so tracers know which span they belong to.
///
/// ```
/// use usdt_markers::{poll_markers, span};
/// # async fn serve(_: u64) -> u16 { 200 }
/// async fn handle(req_id: u64) -> u16 {
///     let s = span!(myapp, request, req_id; parent = 0; end(u16));
///     let status = poll_markers!(myapp, request)
///         .instrument(s.id(), serve(req_id))
///         .await;
///     s.end(status);
///     status
/// }
/// # let _ = handle(1);
/// // Not a future: mark a block instead.
/// let s = span!(myapp, job; parent = 0);
/// {
///     let _on_this_thread = poll_markers!(myapp, job).enter(s.id());
///     // ... the job's work ...
/// }
/// ```
#[macro_export]
macro_rules! poll_markers {
    ($provider:ident, $name:ident) => {{
        fn __usdt_enter(id: u64) {
            if $crate::enabled!($provider, $name) {
                $crate::__usdt_poll_hint!($provider, ::core::stringify!($name));
                $crate::__usdt_fire!(
                    [$provider,
                     ::core::concat!(::core::stringify!($name), "__enter"),
                     ::core::stringify!($name)]
                    id
                );
            }
        }
        fn __usdt_exit(id: u64) {
            if $crate::enabled!($provider, $name) {
                $crate::__usdt_fire!(
                    [$provider,
                     ::core::concat!(::core::stringify!($name), "__exit"),
                     ::core::stringify!($name)]
                    id
                );
            }
        }
        $crate::PollMarkers::__new(__usdt_enter, __usdt_exit)
    }};
}

#[doc(hidden)]
pub mod __private {
    pub use crate::span::{enter, next_span_id};
}
