/*
 * usdt_markers_dyn.h: USDT probes defined at run time (libusdt_markers_dyn.so).
 *
 * A provider collects probe definitions; loading it writes a small ELF shared object with a
 * .note.stapsdt note, a semaphore and a function per probe into a memfd and dlopen()s it, so
 * that tracers (usdt-trace, bpftrace, perf) see its probes in /proc/PID/maps as
 * "/memfd:usdt:PROVIDER (deleted)". Firing an untraced probe reads its semaphore and returns.
 *
 *     usdt_provider *p = usdt_provider_create("myapp");
 *     int32_t types[] = { USDT_UINT64, USDT_INT32 };
 *     usdt_probe *q = usdt_provider_add_probe(p, "query__start", types, 2);
 *     if (!q || usdt_provider_load(p) != 0) fprintf(stderr, "%s\n", usdt_last_error());
 *     uint64_t args[] = { (uint64_t)(uintptr_t)sql, 42 };
 *     usdt_probe_fire(q, args, 2);
 *     usdt_provider_destroy(p);
 *
 * Names are C identifiers of at most 64 bytes; a probe has at most 6 arguments (passed in the
 * integer argument registers). Functions returning int give 0, or -1 with usdt_last_error()
 * set (a per-thread message); functions returning pointers give NULL on error. Probes are
 * defined before loading; unload to define more. Do not unload or destroy a provider while
 * another thread fires its probes.
 */
#ifndef USDT_MARKERS_DYN_H
#define USDT_MARKERS_DYN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Argument types: the size in bytes, negative when signed. A string is passed as its
 * address (USDT_UINT64) and must stay valid during usdt_probe_fire. */
enum {
    USDT_UINT8 = 1, USDT_INT8 = -1,
    USDT_UINT16 = 2, USDT_INT16 = -2,
    USDT_UINT32 = 4, USDT_INT32 = -4,
    USDT_UINT64 = 8, USDT_INT64 = -8,
    USDT_STRING = 8,
};
#define USDT_MAX_ARGS 6

typedef struct usdt_provider usdt_provider;
typedef struct usdt_probe usdt_probe;

usdt_provider *usdt_provider_create(const char *name);
usdt_probe *usdt_provider_add_probe(usdt_provider *p, const char *name,
                                    const int32_t *types, size_t nargs);
int usdt_provider_load(usdt_provider *p);
int usdt_provider_unload(usdt_provider *p);
void usdt_provider_destroy(usdt_provider *p);

/* 1 while a tracer is attached (one load of the semaphore), else 0. */
int usdt_probe_enabled(const usdt_probe *q);
/* The semaphore's address in this process, for tools reading it from outside. */
uintptr_t usdt_probe_semaphore(const usdt_probe *q);
void usdt_probe_fire(const usdt_probe *q, const uint64_t *args, size_t nargs);

const char *usdt_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
