"""USDT probes defined at run time, for Python, through ctypes only (no compiled extension).

It drives libusdt_markers_dyn.so (the usdt-markers-dyn crate built as a cdylib): a provider's
probes become a small ELF object with .note.stapsdt notes, written to a memfd and dlopen()ed,
so usdt-trace, bpftrace or perf can attach to them in the running interpreter.

    import usdt_dyn
    p = usdt_dyn.Provider("myapp")
    start = p.add_probe("request__start", usdt_dyn.STRING)
    end = p.add_probe("request__end", usdt_dyn.INT32)
    p.load()
    start.fire("/index.html")      # does nothing unless a tracer is attached
    end.fire(200)

The library is found through $USDT_DYN_LIB, else next to this repository's target/debug or
target/release, else on the loader's path.
"""

import ctypes
import ctypes.util
import os

UINT8, INT8 = 1, -1
UINT16, INT16 = 2, -2
UINT32, INT32 = 4, -4
UINT64, INT64 = 8, -8
# A string is passed as the address of its NUL-terminated bytes.
STRING = 8
MAX_ARGS = 6

_MASK = (1 << 64) - 1
# The type codes the library takes: the size in bytes, negative when signed.
_TYPES = frozenset((UINT8, INT8, UINT16, INT16, UINT32, INT32, UINT64, INT64))


class UsdtError(Exception):
    """A definition, load or unload the library refused (its message says why)."""


def _library_path():
    env = os.environ.get("USDT_DYN_LIB")
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for profile in ("debug", "release"):
        p = os.path.join(repo, "target", profile, "libusdt_markers_dyn.so")
        if os.path.exists(p):
            return p
    found = ctypes.util.find_library("usdt_markers_dyn")
    if found:
        return found
    raise UsdtError(
        "libusdt_markers_dyn.so not found: build it (cargo build -p usdt-markers-dyn) "
        "or set USDT_DYN_LIB"
    )


_lib = None


def _load_lib():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(_library_path())
        lib.usdt_last_error.restype = ctypes.c_char_p
        lib.usdt_last_error.argtypes = []
        lib.usdt_provider_create.restype = ctypes.c_void_p
        lib.usdt_provider_create.argtypes = [ctypes.c_char_p]
        lib.usdt_provider_add_probe.restype = ctypes.c_void_p
        lib.usdt_provider_add_probe.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_int32),
            ctypes.c_size_t,
        ]
        for f in ("usdt_provider_load", "usdt_provider_unload"):
            getattr(lib, f).restype = ctypes.c_int
            getattr(lib, f).argtypes = [ctypes.c_void_p]
        lib.usdt_provider_destroy.restype = None
        lib.usdt_provider_destroy.argtypes = [ctypes.c_void_p]
        lib.usdt_probe_enabled.restype = ctypes.c_int
        lib.usdt_probe_enabled.argtypes = [ctypes.c_void_p]
        lib.usdt_probe_semaphore.restype = ctypes.c_size_t
        lib.usdt_probe_semaphore.argtypes = [ctypes.c_void_p]
        lib.usdt_probe_fire.restype = None
        lib.usdt_probe_fire.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.c_size_t,
        ]
        _lib = lib
    return _lib


def _error():
    return UsdtError(_lib.usdt_last_error().decode(errors="replace"))


def _c_name(what, name):
    """`name` as the bytes the library gets, checked first: ctypes would pass "a\0b" as "a"."""
    if not isinstance(name, str):
        raise TypeError(f"{what} name must be a str, not {type(name).__name__}")
    if "\0" in name:
        raise ValueError(f"{what} name {name!r} contains a NUL character")
    return name.encode()


def _c_types(probe, types):
    """The type codes, checked first: ctypes would pass 2**32 + 8 as 8 (a c_int32)."""
    if len(types) > MAX_ARGS:
        raise ValueError(f"probe {probe!r}: {len(types)} arguments, at most {MAX_ARGS}")
    for i, t in enumerate(types):
        # bool is an int to Python; True as a type code is a mistake.
        if not isinstance(t, int) or isinstance(t, bool) or t not in _TYPES:
            raise ValueError(
                f"probe {probe!r}: argument {i}: type code {t!r} is not one of "
                f"{sorted(_TYPES)} (UINT8 ... INT64, STRING)"
            )
    return (ctypes.c_int32 * len(types))(*types)


class Probe:
    """One probe; fire() it with ints, str or bytes (strings are passed by address)."""

    def __init__(self, provider, handle, name, types):
        self._provider = provider
        self._handle = handle
        self.name = name
        self.types = types

    def enabled(self):
        """True while a tracer is attached (the kernel raised the semaphore)."""
        return self._handle is not None and _lib.usdt_probe_enabled(self._handle) != 0

    @property
    def semaphore_address(self):
        """The semaphore's address in this process (0 when not loaded)."""
        return _lib.usdt_probe_semaphore(self._handle) if self._provider.loaded else 0

    def fire(self, *args):
        """Fires the probe. Untraced, this is one check and no argument is converted."""
        if not self.enabled():
            return
        if len(args) > MAX_ARGS:
            raise UsdtError(f"probe {self.name}: {len(args)} arguments, at most {MAX_ARGS}")
        keep = []  # buffers that must outlive the call
        values = (ctypes.c_uint64 * MAX_ARGS)()
        for i, a in enumerate(args):
            if isinstance(a, str):
                a = a.encode(errors="replace")
            if isinstance(a, (bytes, bytearray)):
                buf = ctypes.create_string_buffer(bytes(a))
                keep.append(buf)
                values[i] = ctypes.addressof(buf)
            elif a is None:
                values[i] = 0
            else:
                values[i] = int(a) & _MASK
        _lib.usdt_probe_fire(self._handle, values, len(args))
        del keep


class Provider:
    """A set of probes under one provider name, loaded and unloaded together."""

    # Set before anything in __init__ can fail, so that close() (from __del__) on a provider
    # whose constructor raised has nothing to do, rather than an AttributeError that Python
    # prints as "Exception ignored" at exit.
    _h = None
    loaded = False

    def __init__(self, name):
        self.probes = {}
        self.name = name
        c_name = _c_name("provider", name)
        lib = _load_lib()
        h = lib.usdt_provider_create(c_name)
        if not h:
            raise _error()
        self._h = h

    def add_probe(self, name, *types):
        """Defines a probe (before load()) with argument type codes (INT32, STRING, ...)."""
        c_name = _c_name("probe", name)
        arr = _c_types(name, types)
        if not self._h:
            raise UsdtError(f"provider {self.name!r} is closed")
        h = _lib.usdt_provider_add_probe(self._h, c_name, arr, len(types))
        if not h:
            raise _error()
        p = Probe(self, h, name, types)
        self.probes[name] = p
        return p

    def load(self):
        """Makes the probes visible to tracers in this process."""
        if _lib.usdt_provider_load(self._h) != 0:
            raise _error()
        self.loaded = True

    def unload(self):
        """Removes them: firing does nothing until the next load()."""
        if _lib.usdt_provider_unload(self._h) != 0:
            raise _error()
        self.loaded = False

    def close(self):
        """Destroys the provider (unloading its probes); safe to call more than once."""
        if self._h:
            _lib.usdt_provider_destroy(self._h)
            self._h = None
            for p in self.probes.values():
                p._handle = None
            self.loaded = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
