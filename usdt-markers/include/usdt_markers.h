/*
 * usdt_markers.h - USDT probes, is-enabled semaphores and id-paired spans for C (GNU C:
 * gcc or clang), producing the same notes as the Rust `usdt-markers` crate. It does not use
 * systemtap's <sys/sdt.h>; readelf, bpftrace, bcc, libbpf and `usdt-trace list` read its notes.
 *
 *   USDT_PROBE(provider, name, args...)         point probe, 0 to 12 integer/pointer args
 *   USDT_TRACE_CONTEXT(provider, span_id, trace_hi, trace_lo, parent)
 *                                               hand a span the W3C trace id (two u64 halves)
 *                                               and parent span id of the request it serves
 *   USDT_ENABLED(provider, name)                non-zero while a tracer has it enabled
 *   USDT_SPAN_START(provider, name, id, ...)    fires name__start(id, ...)
 *   USDT_SPAN_END(provider, name, id, ...)      fires name__end(id, ...)
 *   USDT_SPAN_ENTER(provider, name, id)         fires name__enter(id): the span's work runs on
 *   USDT_SPAN_EXIT(provider, name, id)          this thread until name__exit(id) (poll markers)
 *   usdt_next_span_id()                         a fresh span id (unique per process, never 0)
 *
 * By convention (the Rust crate's), the argument after a span's id in name__start is the parent
 * span id (0 for none): USDT_SPAN_START(httpserver, request, sid, parent, req_id). Tracers pair
 * __start and __end by (pid, id), not by thread.
 *
 * What gets emitted, per probe site (see the Rust crate's docs for the longer version):
 *
 *  - the site, on x86_64 `nop; nopl 0x0(%rax,%rax,1)` (bytes 90 0f 1f 44 00 00), the note's pc on
 *    the `nop`; a 4-byte `nop` on aarch64. Tracers that know the kernel optimizes uprobes on a
 *    5-byte nop (Linux 6.18+: sys_uprobe, arch_uprobe_optimize) attach at pc + 1, where the kernel
 *    replaces the breakpoint with a `call` into a trampoline after the first hit (~3x cheaper
 *    than the trap); every other tool attaches at pc, the plain 1-byte nop, as before;
 *  - that `call` pushes its return address at -8(%rsp). A leaf function may keep locals (and the
 *    compiler may place a probe argument) in the 128-byte red zone below %rsp, and they would be
 *    overwritten from the second hit on. So the enabled branch of every x86_64 probe also calls
 *    usdt_markers_redzone_guard(), an empty, weak (never inlined) function: a function that makes
 *    a call is not a leaf, and neither gcc nor clang then keeps anything below %rsp. The call
 *    runs only while the probe is enabled (about a nanosecond next to the probe itself);
 *  - a note in the non-allocated section .note.stapsdt:
 *        u32 namesz = 8, u32 descsz, u32 type = 3, "stapsdt\0",
 *        desc = u64 pc, u64 base (address of _.stapsdt.base), u64 semaphore,
 *               "provider\0" "name\0" "args\0", padded to 4 bytes;
 *    args is "SIZE@OPERAND ..." with a negative SIZE for signed values, e.g. "-4@%edi 8@-16(%rbp)";
 *    the operand is whatever the compiler chose ("nor": immediate, register or memory);
 *  - `_.stapsdt.base` (one byte in .stapsdt.base, comdat, retained) for prelink adjustments;
 *  - the semaphore `usdt_sema.<provider>.<name>`: a hidden u16 in section .probes, one comdat
 *    group per name, so all sites of a name (and Rust probes of the same name in the same binary)
 *    share it. The probe site reads it and evaluates its arguments only when it is non-zero;
 *  - a page-aligned, retained anchor at the start of .probes, so no semaphore shares a file page
 *    with RELRO data: with lld's layout the kernel would otherwise raise the RELRO copy of the
 *    page for processes started after the tracer attached (see the Rust crate's docs);
 *  - for spans, a hint note in .note.usdt_markers (non-allocated SHT_NOTE):
 *        namesz = 13, "usdt-markers\0" padded to 16, type 1, desc = "provider\0" "stem\0"
 *    (stem = the span name without __start/__end), telling tracers to pair by the first argument;
 *    poll markers add a note of type 2 with the same descriptor: the span's work runs between
 *    name__enter(id) and name__exit(id) on whichever thread fires them, so tracers can split
 *    the time of a span that moves between threads.
 *
 * Define USDT_MARKERS_DISABLE before including this header to compile every probe to nothing.
 */
#ifndef USDT_MARKERS_H
#define USDT_MARKERS_H

#if defined(__cplusplus)
#error "usdt_markers.h supports C only (it relies on __builtin_choose_expr)"
#endif

#if !defined(USDT_MARKERS_DISABLE) && (defined(__x86_64__) || defined(__aarch64__))

#if defined(__x86_64__)
#define _USDT_T "@" /* section type prefix: @progbits, @note */
#define _USDT_PAGE "4096"
#else
#define _USDT_T "%%"
#define _USDT_PAGE "65536" /* aarch64 pages can be up to 64 KiB */
#endif

#define _USDT_SEMA(provider, sema) "usdt_sema." #provider "." sema

/* Definitions every probe refers to; `.ifndef` because each asm statement repeats them. */
#define _USDT_DEFS(provider, sema)                                                               \
    ".ifndef _.stapsdt.base\n"                                                                   \
    ".pushsection .stapsdt.base, \"aGR\", " _USDT_T "progbits, .stapsdt.base, comdat\n"          \
    ".weak _.stapsdt.base\n"                                                                     \
    ".hidden _.stapsdt.base\n"                                                                   \
    "_.stapsdt.base:\n"                                                                          \
    ".space 1\n"                                                                                 \
    ".size _.stapsdt.base, 1\n"                                                                  \
    ".popsection\n"                                                                              \
    ".endif\n"                                                                                   \
    ".ifndef usdt_markers.probes_anchor\n"                                                       \
    ".pushsection .probes, \"awGR\", " _USDT_T "progbits, usdt_markers.probes_anchor, comdat\n"  \
    ".balign " _USDT_PAGE "\n"                                                                   \
    ".weak usdt_markers.probes_anchor\n"                                                         \
    ".hidden usdt_markers.probes_anchor\n"                                                       \
    "usdt_markers.probes_anchor:\n"                                                              \
    ".byte 0\n"                                                                                  \
    ".popsection\n"                                                                              \
    ".endif\n"                                                                                   \
    ".ifndef " _USDT_SEMA(provider, sema) "\n"                                                   \
    ".pushsection .probes, \"awG\", " _USDT_T "progbits, " _USDT_SEMA(provider, sema)            \
    ", comdat\n"                                                                                 \
    ".balign 2\n"                                                                                \
    ".weak " _USDT_SEMA(provider, sema) "\n"                                                     \
    ".hidden " _USDT_SEMA(provider, sema) "\n"                                                   \
    ".type " _USDT_SEMA(provider, sema) ", " _USDT_T "object\n"                                  \
    ".size " _USDT_SEMA(provider, sema) ", 2\n"                                                  \
    _USDT_SEMA(provider, sema) ":\n"                                                             \
    ".2byte 0\n"                                                                                 \
    ".popsection\n"                                                                              \
    ".endif\n"

#if defined(__x86_64__)
#define _USDT_ENABLED(provider, sema)                                                            \
    (__extension__({                                                                             \
        unsigned int __usdt_v;                                                                   \
        __asm__ __volatile__(_USDT_DEFS(provider, sema)                                          \
                             "movzwl " _USDT_SEMA(provider, sema) "(%%rip), %k0"                 \
                             : "=r"(__usdt_v));                                                  \
        __usdt_v != 0;                                                                           \
    }))
#else
#define _USDT_ENABLED(provider, sema)                                                            \
    (__extension__({                                                                             \
        unsigned int __usdt_v;                                                                   \
        unsigned long __usdt_p;                                                                  \
        __asm__ __volatile__(_USDT_DEFS(provider, sema)                                          \
                             "adrp %x1, " _USDT_SEMA(provider, sema) "\n"                        \
                             "ldrh %w0, [%x1, :lo12:" _USDT_SEMA(provider, sema) "]"             \
                             : "=r"(__usdt_v), "=&r"(__usdt_p));                                 \
        __usdt_v != 0;                                                                           \
    }))
#endif

/* Size and signedness of an argument: arrays and pointers are addresses; only integer, char,
 * enum and bool types can be signed (the choose_expr keeps `(T)-1` away from pointers). */
#define _USDT_ISPTR(x) (__builtin_classify_type(x) == 5 || __builtin_classify_type(x) == 14)
#define _USDT_SIZE(x) (_USDT_ISPTR(x) ? sizeof(void *) : sizeof(x))
#define _USDT_INTTYPE(x)                                                                         \
    __typeof__(__builtin_choose_expr((unsigned)(__builtin_classify_type(x) - 1) < 4u, (x), 0U))
#define _USDT_SIGNED(x) (!((_USDT_INTTYPE(x)) - 1 > (_USDT_INTTYPE(x))0))
#define _USDT_SPEC(x) (_USDT_SIGNED(x) ? -(int)_USDT_SIZE(x) : (int)_USDT_SIZE(x))

/* "%c" prints the constant size bare ("-4"); the value operand prints as the compiler placed
 * it: "$5", "%eax", "-12(%rbp)" on x86_64, "5", "x0", "[sp, 16]" on aarch64. */
#define _USDT_ARGFMT(i) "%c[_usdt_s" #i "]@%[_usdt_a" #i "]"
#define _USDT_OP(i, x) [_usdt_s##i] "n"(_USDT_SPEC(x)), [_usdt_a##i] "nor"(x)

#if defined(__x86_64__)
#ifndef _USDT_SITE /* bench/site_shape.py defines the old 1-byte nop to compare */
#define _USDT_SITE "990: nop\n.byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
#endif
/* The red-zone guard (see the top of this file). Weak, so no compiler may inline or drop the
 * call; hidden, so it stays a direct call inside the object. */
void usdt_markers_redzone_guard(void);
__attribute__((weak, visibility("hidden"), noinline, cold)) void usdt_markers_redzone_guard(void)
{
    __asm__ __volatile__("");
}
#ifndef _USDT_GUARD /* a test defines it away to show the hazard it prevents */
#define _USDT_GUARD() usdt_markers_redzone_guard()
#endif
#else
#define _USDT_SITE "990: nop\n"
#define _USDT_GUARD() ((void)0)
#endif

#define _USDT_NOTE_HEAD(provider, name, sema)                                                    \
    _USDT_SITE                                                                                   \
    ".pushsection .note.stapsdt, \"\", " _USDT_T "note\n"                                        \
    ".balign 4\n"                                                                                \
    ".4byte 992f-991f, 994f-993f, 3\n"                                                           \
    "991: .asciz \"stapsdt\"\n"                                                                  \
    "992: .balign 4\n"                                                                           \
    "993: .8byte 990b\n"                                                                         \
    ".8byte _.stapsdt.base\n"                                                                    \
    ".8byte " _USDT_SEMA(provider, sema) "\n"                                                    \
    ".asciz \"" #provider "\"\n"                                                                 \
    ".asciz \"" name "\"\n"                                                                      \
    ".ascii \""
#define _USDT_NOTE_TAIL                                                                          \
    "\"\n"                                                                                       \
    ".byte 0\n"                                                                                  \
    "994: .balign 4\n"                                                                           \
    ".popsection\n"

/* A note in .note.usdt_markers: `kind` keeps the dedup symbols of the note types apart. */
#define _USDT_MARKERS_NOTE(provider, stem, kind, ntype)                                          \
    __asm__ __volatile__(".ifndef .Lusdt_" kind "." #provider "." stem "\n"                      \
                         ".pushsection .note.usdt_markers, \"\", " _USDT_T "note\n"              \
                         ".balign 4\n"                                                           \
                         ".4byte 992f-991f, 994f-993f, " ntype "\n"                               \
                         "991: .asciz \"usdt-markers\"\n"                                        \
                         "992: .balign 4\n"                                                      \
                         "993:\n"                                                                \
                         ".Lusdt_" kind "." #provider "." stem ":\n"                              \
                         ".asciz \"" #provider "\"\n"                                            \
                         ".asciz \"" stem "\"\n"                                                 \
                         "994: .balign 4\n"                                                      \
                         ".popsection\n"                                                         \
                         ".endif\n" ::)
#define _USDT_HINT(provider, stem) _USDT_MARKERS_NOTE(provider, stem, "hint", "1")
#define _USDT_POLL_HINT(provider, stem) _USDT_MARKERS_NOTE(provider, stem, "poll", "2")

/* One variant per argument count. */
#define _USDT_FIRE_0(provider, name, sema) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) "" _USDT_NOTE_TAIL::)
#define _USDT_FIRE_1(provider, name, sema, a1) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) _USDT_NOTE_TAIL::_USDT_OP(1, a1))
#define _USDT_FIRE_2(provider, name, sema, a1, a2) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2))
#define _USDT_FIRE_3(provider, name, sema, a1, a2, a3) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3))
#define _USDT_FIRE_4(provider, name, sema, a1, a2, a3, a4) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4))
#define _USDT_FIRE_5(provider, name, sema, a1, a2, a3, a4, a5) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5))
#define _USDT_FIRE_6(provider, name, sema, a1, a2, a3, a4, a5, a6) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) " " _USDT_ARGFMT(6) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5), _USDT_OP(6, a6))
#define _USDT_FIRE_7(provider, name, sema, a1, a2, a3, a4, a5, a6, a7) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) " " _USDT_ARGFMT(6) " " _USDT_ARGFMT(7) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5), _USDT_OP(6, a6), _USDT_OP(7, a7))
#define _USDT_FIRE_8(provider, name, sema, a1, a2, a3, a4, a5, a6, a7, a8) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) " " _USDT_ARGFMT(6) " " _USDT_ARGFMT(7) " " _USDT_ARGFMT(8) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5), _USDT_OP(6, a6), _USDT_OP(7, a7), _USDT_OP(8, a8))
#define _USDT_FIRE_9(provider, name, sema, a1, a2, a3, a4, a5, a6, a7, a8, a9) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) " " _USDT_ARGFMT(6) " " _USDT_ARGFMT(7) " " _USDT_ARGFMT(8) " " _USDT_ARGFMT(9) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5), _USDT_OP(6, a6), _USDT_OP(7, a7), _USDT_OP(8, a8), _USDT_OP(9, a9))
#define _USDT_FIRE_10(provider, name, sema, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) " " _USDT_ARGFMT(6) " " _USDT_ARGFMT(7) " " _USDT_ARGFMT(8) " " _USDT_ARGFMT(9) " " _USDT_ARGFMT(10) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5), _USDT_OP(6, a6), _USDT_OP(7, a7), _USDT_OP(8, a8), _USDT_OP(9, a9), _USDT_OP(10, a10))
#define _USDT_FIRE_11(provider, name, sema, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) " " _USDT_ARGFMT(6) " " _USDT_ARGFMT(7) " " _USDT_ARGFMT(8) " " _USDT_ARGFMT(9) " " _USDT_ARGFMT(10) " " _USDT_ARGFMT(11) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5), _USDT_OP(6, a6), _USDT_OP(7, a7), _USDT_OP(8, a8), _USDT_OP(9, a9), _USDT_OP(10, a10), _USDT_OP(11, a11))
#define _USDT_FIRE_12(provider, name, sema, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) \
    __asm__ __volatile__(_USDT_NOTE_HEAD(provider, name, sema) _USDT_ARGFMT(1) " " _USDT_ARGFMT(2) " " _USDT_ARGFMT(3) " " _USDT_ARGFMT(4) " " _USDT_ARGFMT(5) " " _USDT_ARGFMT(6) " " _USDT_ARGFMT(7) " " _USDT_ARGFMT(8) " " _USDT_ARGFMT(9) " " _USDT_ARGFMT(10) " " _USDT_ARGFMT(11) " " _USDT_ARGFMT(12) _USDT_NOTE_TAIL::_USDT_OP(1, a1), _USDT_OP(2, a2), _USDT_OP(3, a3), _USDT_OP(4, a4), _USDT_OP(5, a5), _USDT_OP(6, a6), _USDT_OP(7, a7), _USDT_OP(8, a8), _USDT_OP(9, a9), _USDT_OP(10, a10), _USDT_OP(11, a11), _USDT_OP(12, a12))

#define _USDT_CAT_(a, b) a##b
#define _USDT_CAT(a, b) _USDT_CAT_(a, b)
#define _USDT_NARG(...) _USDT_NARG_(0, ##__VA_ARGS__, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define _USDT_NARG_(_0, _1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, n, ...) n
#define _USDT_FIRE(provider, name, sema, ...)                                                    \
    _USDT_CAT(_USDT_FIRE_, _USDT_NARG(__VA_ARGS__))(provider, name, sema, ##__VA_ARGS__)

#define USDT_ENABLED(provider, name) _USDT_ENABLED(provider, #name)

#define USDT_PROBE(provider, name, ...)                                                          \
    do {                                                                                         \
        if (__builtin_expect(USDT_ENABLED(provider, name), 0)) {                                 \
            _USDT_GUARD();                                                                       \
            _USDT_FIRE(provider, #name, #name, ##__VA_ARGS__);                                   \
        }                                                                                        \
    } while (0)

#define USDT_SPAN_START(provider, name, id, ...)                                                 \
    do {                                                                                         \
        if (__builtin_expect(USDT_ENABLED(provider, name), 0)) {                                 \
            _USDT_HINT(provider, #name);                                                         \
            _USDT_GUARD();                                                                       \
            _USDT_FIRE(provider, #name "__start", #name, id, ##__VA_ARGS__);                     \
        }                                                                                        \
    } while (0)

#define USDT_SPAN_END(provider, name, id, ...)                                                   \
    do {                                                                                         \
        if (__builtin_expect(USDT_ENABLED(provider, name), 0)) {                                 \
            _USDT_GUARD();                                                                       \
            _USDT_FIRE(provider, #name "__end", #name, id, ##__VA_ARGS__);                       \
        }                                                                                        \
    } while (0)

#define USDT_SPAN_ENTER(provider, name, id)                                                      \
    do {                                                                                         \
        if (__builtin_expect(USDT_ENABLED(provider, name), 0)) {                                 \
            _USDT_POLL_HINT(provider, #name);                                                    \
            _USDT_FIRE(provider, #name "__enter", #name, id);                                    \
        }                                                                                        \
    } while (0)

#define USDT_SPAN_EXIT(provider, name, id)                                                       \
    do {                                                                                         \
        if (__builtin_expect(USDT_ENABLED(provider, name), 0))                                   \
            _USDT_FIRE(provider, #name "__exit", #name, id);                                     \
    } while (0)

/* The W3C trace context of the request span `span_id` serves: the 128-bit trace id as two
 * 64-bit halves and the application's parent span id. `usdt-trace watch --otlp` then puts the
 * span, and what nests in it, in that trace. Nothing for a span that is not recording (id 0). */
#define USDT_TRACE_CONTEXT(provider, span_id, trace_hi, trace_lo, parent)                        \
    do {                                                                                         \
        if ((span_id) != 0)                                                                      \
            USDT_PROBE(provider, trace__context, span_id, trace_hi, trace_lo, parent);           \
    } while (0)

/* One counter per executable or library (weak, hidden). A forked child continues it; tracers
 * pair spans by (pid, id). */
__attribute__((weak, visibility("hidden"))) unsigned long long usdt_markers_span_counter = 1;

static __inline__ __attribute__((unused)) unsigned long long usdt_next_span_id(void)
{
    return __atomic_fetch_add(&usdt_markers_span_counter, 1, __ATOMIC_RELAXED);
}

#else /* disabled or unsupported arch: arguments are type-checked, never evaluated */

static __inline__ __attribute__((unused)) void _usdt_unused(int dummy, ...)
{
    (void)dummy;
}
#define USDT_ENABLED(provider, name) 0
#define USDT_PROBE(provider, name, ...)                                                          \
    do {                                                                                         \
        if (0)                                                                                   \
            _usdt_unused(0, ##__VA_ARGS__);                                                      \
    } while (0)
#define USDT_SPAN_START(provider, name, id, ...) USDT_PROBE(provider, name, id, ##__VA_ARGS__)
#define USDT_SPAN_END(provider, name, id, ...) USDT_PROBE(provider, name, id, ##__VA_ARGS__)
#define USDT_SPAN_ENTER(provider, name, id) USDT_PROBE(provider, name, id)
#define USDT_SPAN_EXIT(provider, name, id) USDT_PROBE(provider, name, id)
#define USDT_TRACE_CONTEXT(provider, span_id, trace_hi, trace_lo, parent)                        \
    USDT_PROBE(provider, trace__context, span_id, trace_hi, trace_lo, parent)
static __inline__ __attribute__((unused)) unsigned long long usdt_next_span_id(void)
{
    return 0;
}

#endif
#endif /* USDT_MARKERS_H */
